#!/usr/bin/env bash
# The gram engine's rigorous default (the judge at every N; plain sums past the register file
# with max |key| bounded through |c|) on the GPU machine, from the repo root with .gl/ carried
# (.gl/bin/bench_gram and sequences built from this tree, the fortunes, the loader .debs).
# Writes $OUT/rigour.log (GPU times, the workload rows of BENCHMARKS.md) and $OUT/oracle.log
# (16 spread full sequences of each table with the default arithmetic, float64 oracle on the
# GPU); packed into rigour.tgz.
#   real31k (bench/make-real31k.py) centred fp16: the first half of the whole cache (15,551 full
#           sequences; the whole does not fit one batch next to G), the default, and 2,048 full
#           sequences with the judge's variants (max |key| over the keys; no events) beside it
#   fortunes 14,943 centred fp16 and the peer's 8,359 x 768 fp32: whole caches, the default,
#           plain sums with the judge, and without the judge for reference
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack rigour
B=.gl/bin
T=$(mktemp -d)
L=$OUT/rigour.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$R31" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
G="grep -v ^.*fp..\ G:"
timeout 150 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 15551 --compensated 0 --judge 1 \
  --label "real31k, first half of the whole cache (15,551 full sequences), default (plain + judge, |c| bound)" 2>&1 | tee -a "$L"
timeout 150 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --compensated 0 --judge 1 \
  --judge-variants c,keys,noevents --label "real31k 2048 full, plain + judge variants" 2>&1 | tee -a "$L"
timeout 60 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --compensated 0 --judge 0 --wg 1024 \
  --label "real31k 2048 full, plain, no judge (1,024 invocations: its fastest)" 2>&1 | tee -a "$L"
timeout 150 $B/bench_gram --table "$FORT" --center --precisions fp16 --compensated 1,0 --judge 1,0 \
  --label "fortunes 14,943 centred fp16 whole cache" 2>&1 | tee -a "$L"
timeout 100 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 1,0 \
  --label "peer 8,359 x 768 fp32 whole cache" 2>&1 | tee -a "$L"
h200_oracle "$R31" 31102 "real31k centred fp16, default" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, default" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, plain sums (+ judge)" --center --precision fp16 --plain-sums
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, default" --precision fp32
