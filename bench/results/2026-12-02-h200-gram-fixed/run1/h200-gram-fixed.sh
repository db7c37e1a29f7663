#!/usr/bin/env bash
# Kept with its log (run from the repo root as bench/<name>.sh with .gl/ carried).
# Fixed-point gram keys (shaders/gram_fixed.comp, DIVERSITY_GRAM=fixed) against the default
# arithmetic, on the GPU machine from the repo root with .gl/ carried (.gl/bin/bench_gram and
# sequences built from this tree, the fortunes, the loader .debs). GPU time of the rows:
# real31k (bench/make-real31k.py, centred fp16) 2,048 full sequences, the fortunes' and the
# peer's whole caches; the fixed keys' settling compiled out (`nosettle`, timing only) beside
# them; workgroup sizes. Then 16 spread full sequences of each table with fixed keys through
# the float64 oracle on the GPU. $OUT/fixed.log, $OUT/oracle.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/fixed.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
G() { grep -v "^ *fp.. G:"; }
timeout 100 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 2048 \
  --label "real31k 2048 full, default (plain + judge)" 2>&1 | G | tee -a "$L"
DIVERSITY_GRAM=fixed timeout 150 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 2048 \
  --wg 512,1024 --judge-variants c,nosettle --label "real31k 2048 full, FIXED" 2>&1 | tee -a "$L"
timeout 100 $B/bench_gram --table "$FORT" --center --precisions fp16 \
  --label "fortunes centred fp16 whole cache, default" 2>&1 | G | tee -a "$L"
DIVERSITY_GRAM=fixed timeout 150 $B/bench_gram --table "$FORT" --center --precisions fp16 \
  --wg 256,512,1024 --label "fortunes centred fp16 whole cache, FIXED" 2>&1 | tee -a "$L"
timeout 100 $B/bench_gram --table "$T/seed.npy" --precisions fp32 \
  --label "peer 8359x768 fp32 whole cache, default" 2>&1 | G | tee -a "$L"
DIVERSITY_GRAM=fixed timeout 150 $B/bench_gram --table "$T/seed.npy" --precisions fp32 \
  --wg 128,256,512 --judge-variants c,nosettle --label "peer 8359x768 fp32 whole cache, FIXED" 2>&1 | tee -a "$L"
echo "== $(date +%T) oracles" | tee -a "$L"
export DIVERSITY_GRAM=fixed
h200_oracle "$R31" 31102 "real31k centred fp16, FIXED" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, FIXED" --center --precision fp16
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, FIXED" --precision fp32
echo "== $(date +%T) done" | tee -a "$L"
