#!/usr/bin/env bash
# Workgroup sizes the plan does not pick, keys in registers, 9ea8f96's build (.gl/bin/bench_gram):
# real31k 2,048 full at 256 (122 keys a lane) against 512 (the plan); the peer at 512 (17 keys a
# lane: two workgroups an SM if the driver holds it to 64 registers) against 256; the fortunes at
# 1,024 (15 keys a lane) and 512 against 256; the driver's register counts; same bits checked by
# bench_gram within each call. GPU machine, repo root, .gl/ carried. $OUT/wg.log, $OUT/stats.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/wg.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
st() { DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram "$@" --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed" | tee -a "$OUT/stats.log"; }
st --table "$R31" --center --precisions fp16 --wg 256 --placements registers
st --table "$T/seed.npy" --precisions fp32 --wg 512 --placements registers
st --table "$FORT" --center --precisions fp16 --wg 512,1024 --placements registers
g() { timeout 150 $B/bench_gram "$@" 2>&1 | grep -v "G (fixed" | tee -a "$L"; }
g --table "$T/seed.npy" --precisions fp32 --wg 256,512,256,512 --placements registers --label "peer whole, 256 / 512"
g --table "$R31" --center --precisions fp16 --starts 2048 --wg 512,256,512,256 --placements registers --label "real31k 2048 full, 512 / 256"
g --table "$FORT" --center --precisions fp16 --wg 256,1024,512 --placements registers --label "fortunes whole, 256 / 1024 / 512"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
