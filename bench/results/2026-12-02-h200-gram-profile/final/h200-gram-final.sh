#!/usr/bin/env bash
# The gram engine's rows as this tree runs them (.gl/bin/bench_gram and .gl/bin/sequences of
# 9ea8f96: a fresh key's chain loaded 24 values at a time) against f01c71e (.gl/bin/bench_gram_head):
# the peer table's whole cache at 256 (the plan) and 128 invocations, alternating, every sequence
# compared; the fortunes' whole cache; real31k's whole cache (all 31,102 full sequences, measured
# this time, not scaled from half); the float64 oracle on 16 spread full sequences of each table.
# The fortunes with 2 and 4 row loads in flight (registers). GPU machine, repo root, .gl/
# carried. $OUT/final.log, $OUT/oracle.log, $OUT/stats.log.
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
g() { local v=$1; shift; timeout 200 $B/$v "$@" 2>&1 | grep -v "G (fixed" | tee -a "$L"; }
for i in 1 2; do
  g bench_gram_head --table "$T/seed.npy" --precisions fp32 --label "f01c71e peer whole" --seqs "$T/ph$i.u32"
  g bench_gram --table "$T/seed.npy" --precisions fp32 --label "9ea8f96 peer whole" --seqs "$T/p$i.u32"
  g bench_gram --table "$T/seed.npy" --precisions fp32 --wg 128 --placements registers --label "9ea8f96 peer whole, 128" --seqs "$T/q$i.u32"
done
g bench_gram_head --table "$FORT" --center --precisions fp16 --label "f01c71e fortunes whole" --seqs "$T/fh.u32"
g bench_gram --table "$FORT" --center --precisions fp16 --label "9ea8f96 fortunes whole" --seqs "$T/f.u32"
# Fewer row loads in flight: does the driver then hold the fortunes' kernel at 256 invocations to
# 128 registers (two workgroups an SM, as the peer's 33 keys a lane get)?
DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram --table "$FORT" --center --precisions fp16 --starts 132 --steps 20 --loads 1,2,4 --label stats 2>&1 | grep -E "gram_fixed" | tee -a "$OUT/stats.log"
g bench_gram --table "$FORT" --center --precisions fp16 --loads 2,4 --label "9ea8f96 fortunes whole, fewer loads"
for f in ph2 p1 p2 q1 q2; do cmp "$T/ph1.u32" "$T/$f.u32" && echo "same bits: peer $f" | tee -a "$L" || echo "DIFFERENT bits: peer $f" | tee -a "$L"; done
cmp "$T/fh.u32" "$T/f.u32" && echo "same bits: fortunes" | tee -a "$L" || echo "DIFFERENT bits: fortunes" | tee -a "$L"
rm -f "$T"/*.u32
g bench_gram --table "$R31" --center --precisions fp16 --label "9ea8f96 real31k whole cache (31,102 full sequences), default"
h200_oracle "$R31" 31102 "real31k centred fp16, default" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, default" --center --precision fp16
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, default" --precision fp32
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
