#!/usr/bin/env bash
# Kept with its log (run from the repo root as bench/<name>.sh with .gl/ carried).
# The gram engine's new default, fixed-point keys (commit d35e5c3 and later: shaders/gram_fixed.comp),
# beside the float arithmetics in the same run; the three rows; the periodic refresh
# on and off; the settling compiled out (nosettle, timing only); real31k's first half of the
# whole cache; 16 spread full sequences of each table through the float64 oracle on the GPU.
# GPU machine, repo root, .gl/ carried (.gl/bin/bench_gram and sequences of this tree, the
# fortunes). $OUT/fixed3.log, $OUT/oracle.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/fixed3.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { timeout 200 $B/bench_gram "$@" 2>&1 | tee -a "$L"; }
g --table "$R31" --center --precisions fp16 --starts 2048 --refresh d,0 --judge-variants c,nosettle \
  --label "real31k 2048 full: fixed-point keys (default), refresh default / never, settling compiled out"
g --table "$R31" --center --precisions fp16 --starts 2048 --compensated 0 \
  --label "real31k 2048 full: plain float sums with the float judge (the previous default)"
g --table "$R31" --center --precisions fp16 --starts 2048 --compensated 0 --judge 0 --wg 1024 \
  --label "real31k 2048 full: plain float sums, no judge (no bound; 1,024 invocations)"
g --table "$FORT" --center --precisions fp16 --refresh d,0 --judge-variants c,nosettle \
  --label "fortunes centred fp16 whole cache: fixed-point keys"
g --table "$FORT" --center --precisions fp16 --compensated 0 --judge 1,0 \
  --label "fortunes centred fp16 whole cache: plain float sums, float judge (previous default) / none"
g --table "$T/seed.npy" --precisions fp32 --refresh d,0 --judge-variants c,nosettle \
  --label "peer 8359x768 fp32 whole cache: fixed-point keys"
g --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 1,0 \
  --label "peer 8359x768 fp32 whole cache: compensated (previous default) / plain, float judge / none"
g --table "$R31" --center --precisions fp16 --starts 15551 \
  --label "real31k first half of the whole cache (15,551 full sequences): fixed-point keys"
echo "== $(date +%T) oracles" | tee -a "$L"
h200_oracle "$R31" 31102 "real31k centred fp16, default (fixed-point)" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, default (fixed-point)" --center --precision fp16
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, default (fixed-point)" --precision fp32
echo "== $(date +%T) done" | tee -a "$L"
