#!/usr/bin/env bash
# Kept with its log (run from the repo root as bench/<name>.sh with .gl/ carried).
# The gram engine's default (fixed-point keys, refresh off) at this commit: the rows
# (real31k 2,048 full sequences and the first half of its whole cache, the fortunes' and the
# peer's whole caches), then 16 spread full sequences of each table through the float64 oracle
# on the GPU. GPU machine, repo root, .gl/ carried. $OUT/final.log, $OUT/oracle.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/final.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { timeout 200 $B/bench_gram "$@" 2>&1 | tee -a "$L"; }
g --table "$R31" --center --precisions fp16 --starts 2048 --label "real31k 2048 full, default"
g --table "$FORT" --center --precisions fp16 --label "fortunes centred fp16 whole cache, default"
g --table "$T/seed.npy" --precisions fp32 --label "peer 8359x768 fp32 whole cache, default"
h200_oracle "$R31" 31102 "real31k centred fp16, default" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, default" --center --precision fp16
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, default" --precision fp32
g --table "$R31" --center --precisions fp16 --starts 15551 \
  --label "real31k first half of the whole cache (15,551 full sequences), default"
echo "== $(date +%T) done" | tee -a "$L"
