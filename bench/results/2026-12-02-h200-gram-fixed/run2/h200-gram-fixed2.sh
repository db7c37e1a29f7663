#!/usr/bin/env bash
# Kept with its log (run from the repo root as bench/<name>.sh with .gl/ carried).
# Fixed-point gram keys, second build (loads issued before the step's bookkeeping, the running
# sum updated each step from a row loaded beside the Gram row, bands gathered by atomics, shifts
# rounded to nearest), beside the default arithmetic in the same run, row loads in flight swept.
# GPU machine, repo root, .gl/ carried (.gl/bin/bench_gram and sequences of this tree, the
# fortunes). $OUT/fixed2.log, $OUT/oracle.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/fixed2.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
G() { grep -v "^ *fp.. G:"; }
timeout 100 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --compensated 0 --judge 1,0 \
  --label "real31k 2048 full, plain sums with the judge (the default) and without" 2>&1 | G | tee -a "$L"
DIVERSITY_GRAM=fixed timeout 150 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 2048 \
  --wg 512 --loads 8,16,32 --judge-variants c,nosettle --label "real31k 2048 full, FIXED2" 2>&1 | tee -a "$L"
timeout 100 $B/bench_gram --table "$FORT" --center --precisions fp16 --compensated 0 --judge 1,0 \
  --label "fortunes centred fp16 whole cache, plain sums with the judge (the default) and without" 2>&1 | G | tee -a "$L"
DIVERSITY_GRAM=fixed timeout 150 $B/bench_gram --table "$FORT" --center --precisions fp16 \
  --wg 256,512 --loads 8,32 --judge-variants c,nosettle --label "fortunes centred fp16 whole cache, FIXED2" 2>&1 | tee -a "$L"
timeout 100 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 1,0 \
  --label "peer 8359x768 fp32 whole cache, compensated / plain, judge / none" 2>&1 | G | tee -a "$L"
DIVERSITY_GRAM=fixed timeout 150 $B/bench_gram --table "$T/seed.npy" --precisions fp32 \
  --wg 256 --loads 8,16,33 --judge-variants c,nosettle --label "peer 8359x768 fp32 whole cache, FIXED2" 2>&1 | tee -a "$L"
echo "== $(date +%T) oracles" | tee -a "$L"
export DIVERSITY_GRAM=fixed
h200_oracle "$R31" 31102 "real31k centred fp16, FIXED2" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, FIXED2" --center --precision fp16
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, FIXED2" --precision fp32
echo "== $(date +%T) done" | tee -a "$L"
