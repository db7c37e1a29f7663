#!/usr/bin/env bash
# The gram judge settled from device memory with the keys reloaded after (GramOptions::
# judge_settle_mem, `mem`: the same bits as the default) beside the default (`c`) and the
# timing-only `nosettle` (no band code at all), on the GPU machine from the repo root with .gl/
# carried: real31k (bench/make-real31k.py) 2,048 full sequences and the first half of its whole
# cache, the fortunes and the peer whole caches; then, when PARTS has ivf, bench/h200-ivf-session.sh.
# Packed into session-b.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack session-b
B=.gl/bin
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
step() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.log"; }
PARTS=${PARTS:-gram ivf}
for part in $PARTS; do
  case $part in
  gram)
    step gram
    python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
    python3 bench/make-real31k.py "$T/fortunes.npy" "$T/r31.npy" | tee -a "$OUT/gram.log"
    h200_seed_npy "$T"
    timeout 60 $B/bench_gram --table "$T/r31.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
    DIVERSITY_PIPELINE_STATS=1 timeout 200 $B/bench_gram --table "$T/r31.npy" --center --precisions fp16 --starts 2048 --compensated 0 --judge 1 \
      --judge-variants c,mem,nosettle --label "real31k 2048 full, plain + judge" 2>&1 | tee -a "$OUT/gram.log"
    timeout 150 $B/bench_gram --table "$T/fortunes.npy" --center --precisions fp16 --compensated 1,0 --judge 1 \
      --judge-variants c,mem --label "fortunes 14,943 centred fp16 whole cache" 2>&1 | tee -a "$OUT/gram.log"
    timeout 100 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 1 \
      --judge-variants c,mem --label "peer 8,359 x 768 fp32 whole cache" 2>&1 | tee -a "$OUT/gram.log"
    timeout 150 $B/bench_gram --table "$T/r31.npy" --center --precisions fp16 --starts 15551 --compensated 0 --judge 1 \
      --judge-variants mem --label "real31k, first half of the whole cache (15,551 full sequences), plain + judge, mem" 2>&1 | tee -a "$OUT/gram.log" ;;
  ivf)
    step ivf
    [ -f bench/h200-ivf-session.sh ] && bash bench/h200-ivf-session.sh ;;
  esac
done
step done
