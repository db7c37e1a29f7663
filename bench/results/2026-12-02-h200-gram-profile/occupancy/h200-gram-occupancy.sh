#!/usr/bin/env bash
# Does a second resident workgroup per SM pay? The profile (bench/h200-gram-profile.sh) showed a
# step's row loads take 70-80% of it and the rest (the pick's barrier, the step's end) is latency
# with no loads in flight; at 256 invocations the driver gives the fortunes' kernel 254
# registers (one workgroup an SM). Here: 64 and 128 invocations with keys in registers (two or
# more workgroups an SM) on the peer and the fortunes, against the default, same bits checked;
# row loads 24 and 32 at real31k; a fresh key's chain loaded in one go (.gl/bin/bench_gram_fl24,
# built with DIVERSITY_SHADER_DEFINES=GF_FRESH_LOADS=24u); the driver's register counts.
# GPU machine, repo root, .gl/ carried. $OUT/occ.log, $OUT/stats.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/occ.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { local v=$1; shift; timeout 150 $B/$v "$@" 2>&1 | tee -a "$L"; }
st() { DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram "$@" --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed|wg" | tee -a "$OUT/stats.log"; }
st --table "$T/seed.npy" --precisions fp32 --wg 64,128 --placements registers
st --table "$FORT" --center --precisions fp16 --wg 128 --placements registers
st --table "$R31" --center --precisions fp16 --loads 24,32
g bench_gram --table "$T/seed.npy" --precisions fp32 --label "peer whole, default" --seqs "$T/peer-d.u32"
g bench_gram --table "$T/seed.npy" --precisions fp32 --wg 128 --placements registers --label "peer whole, 128" --seqs "$T/peer-128.u32"
g bench_gram --table "$T/seed.npy" --precisions fp32 --wg 64 --placements registers --label "peer whole, 64" --seqs "$T/peer-64.u32"
g bench_gram_fl24 --table "$T/seed.npy" --precisions fp32 --label "peer whole, fresh loads 24" --seqs "$T/peer-fl.u32"
g bench_gram --table "$T/seed.npy" --precisions fp32 --label "peer whole, default again"
g bench_gram --table "$FORT" --center --precisions fp16 --label "fortunes whole, default" --seqs "$T/fort-d.u32"
g bench_gram --table "$FORT" --center --precisions fp16 --wg 128 --placements registers --label "fortunes whole, 128" --seqs "$T/fort-128.u32"
g bench_gram_fl24 --table "$FORT" --center --precisions fp16 --label "fortunes whole, fresh loads 24"
g bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --loads 0,24,32 --label "real31k 2048 full, loads"
g bench_gram_fl24 --table "$R31" --center --precisions fp16 --starts 2048 --label "real31k 2048 full, fresh loads 24"
for f in peer-128 peer-64 peer-fl; do cmp "$T/peer-d.u32" "$T/$f.u32" && echo "same bits: $f" | tee -a "$L" || echo "DIFFERENT bits: $f" | tee -a "$L"; done
cmp "$T/fort-d.u32" "$T/fort-128.u32" && echo "same bits: fort-128" | tee -a "$L" || echo "DIFFERENT bits: fort-128" | tee -a "$L"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
