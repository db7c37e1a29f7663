#!/usr/bin/env bash
# Two sequences a workgroup (fixed-point keys in registers, GramOptions::per_workgroup = 2): a
# workgroup of 2 × 256 invocations is held to 128 registers, so the fortunes' two sequences fill
# an SM where one workgroup of 256 took 254 registers (bench/h200-gram-occupancy.sh). Here
# .gl/bin/bench_gram (this tree) at 1 and 2 a workgroup against .gl/bin/bench_gram_head (f01c71e),
# alternating, on the fortunes and the peer; real31k's default against f01c71e (no regression);
# every sequence compared; the driver's register counts. GPU machine, repo root, .gl/ carried.
# $OUT/pairs.log, $OUT/stats.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/pairs.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { local v=$1; shift; timeout 150 $B/$v "$@" 2>&1 | tee -a "$L"; }
st() { DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram "$@" --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed|wg" | tee -a "$OUT/stats.log"; }
st --table "$FORT" --center --precisions fp16 --per-workgroup 1,2 --loads 0,16
st --table "$T/seed.npy" --precisions fp32 --per-workgroup 2
for i in 1 2; do
  g bench_gram_head --table "$FORT" --center --precisions fp16 --label "head fortunes whole" --seqs "$T/fh$i.u32"
  g bench_gram --table "$FORT" --center --precisions fp16 --per-workgroup 2 --label "new fortunes whole, 2 a workgroup" --seqs "$T/f2$i.u32"
  g bench_gram --table "$FORT" --center --precisions fp16 --label "new fortunes whole, default" --seqs "$T/f1$i.u32"
  g bench_gram_head --table "$T/seed.npy" --precisions fp32 --label "head peer whole" --seqs "$T/ph$i.u32"
  g bench_gram --table "$T/seed.npy" --precisions fp32 --per-workgroup 2 --label "new peer whole, 2 a workgroup" --seqs "$T/p2$i.u32"
  g bench_gram --table "$T/seed.npy" --precisions fp32 --label "new peer whole, default" --seqs "$T/p1$i.u32"
done
g bench_gram --table "$FORT" --center --precisions fp16 --per-workgroup 2 --loads 16 --label "new fortunes whole, 2 a workgroup, 16 loads"
g bench_gram --table "$T/seed.npy" --precisions fp32 --wg 128 --placements registers --per-workgroup 1,2 --label "new peer whole, 128"
g bench_gram_head --table "$R31" --center --precisions fp16 --starts 2048 --label "head real31k 2048 full" --seqs "$T/rh.u32"
g bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --label "new real31k 2048 full" --seqs "$T/r1.u32"
for f in fh2 f21 f22 f11 f12; do cmp "$T/fh1.u32" "$T/$f.u32" && echo "same bits: fortunes $f" | tee -a "$L" || echo "DIFFERENT bits: fortunes $f" | tee -a "$L"; done
for f in ph2 p21 p22 p11 p12; do cmp "$T/ph1.u32" "$T/$f.u32" && echo "same bits: peer $f" | tee -a "$L" || echo "DIFFERENT bits: peer $f" | tee -a "$L"; done
cmp "$T/rh.u32" "$T/r1.u32" && echo "same bits: real31k" | tee -a "$L" || echo "DIFFERENT bits: real31k" | tee -a "$L"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
