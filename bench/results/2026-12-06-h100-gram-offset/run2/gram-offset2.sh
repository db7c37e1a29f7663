#!/usr/bin/env bash
# Run 2: the keys' common offset reworked (a specialization constant, on for kernels with up to 40 keys a lane; offsets only where the live range is narrow; no per-step square root). Otherwise as run 1 (gram-offset.sh): at a step's end, where neither the bound
# through |c| nor the keys' own bound M keeps the next step under 2^30, the live keys lose their
# range's midpoint before any shift): .gl/bin/bench_gram (this tree) against
# .gl/bin/bench_gram_head (42da49d, shifts by |c| alone), alternating, every sequence compared;
# the peer's whole cache twice, the fortunes' whole cache centred (the issue's row) and as
# stored, real31k's 2,048 full sequences; the registers of both; then the float64 oracle on 16
# spread full sequences of each issue table with this tree's `sequences`. GPU machine, repo
# root, .gl/ carried (.gl/data/fortunes-minilm.f32). $OUT/rows.log, $OUT/oracle.log, $OUT/stats.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/rows.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
h200_gram_tables "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 2048 --steps 300 --label warm-up > /dev/null 2>&1
g() { local v=$1; shift; echo "== $(date +%T) $v $*" >> "$L"; timeout 60 $B/$v "$@" 2>&1 | grep -v "G (fixed" | tee -a "$L"; }
for i in 1 2; do
  g bench_gram_head --table "$T/seed.npy" --precisions fp32 --label "head peer whole" --seqs "$T/ph$i.u32"
  g bench_gram --table "$T/seed.npy" --precisions fp32 --label "offset peer whole" --seqs "$T/p$i.u32"
done
g bench_gram_head --table "$FORT" --center --precisions fp16 --label "head fortunes centred whole" --seqs "$T/fh.u32"
g bench_gram --table "$FORT" --center --precisions fp16 --label "offset fortunes centred whole" --seqs "$T/f.u32"
g bench_gram_head --table "$FORT" --precisions fp16 --label "head fortunes as stored whole" --seqs "$T/sh.u32"
g bench_gram --table "$FORT" --precisions fp16 --label "offset fortunes as stored whole" --seqs "$T/s.u32"
g bench_gram_head --table "$R31" --center --precisions fp16 --starts 2048 --label "head real31k 2048 full" --seqs "$T/rh.u32"
g bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --label "offset real31k 2048 full" --seqs "$T/r.u32"
for f in ph2 p1 p2; do cmp "$T/ph1.u32" "$T/$f.u32" && echo "same bits: peer $f" | tee -a "$L" || echo "DIFFERENT bits: peer $f" | tee -a "$L"; done
for p in f s r; do cmp "$T/${p}h.u32" "$T/$p.u32" && echo "same bits: $p" | tee -a "$L" || echo "DIFFERENT bits: $p" | tee -a "$L"; done
rm -f "$T"/*.u32
for v in bench_gram; do
  DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/$v --table "$FORT" --center --precisions fp16 --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed" | sed "s/^/$v fortunes: /" | tee -a "$OUT/stats.log"
  DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/$v --table "$T/seed.npy" --precisions fp32 --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed" | sed "s/^/$v peer: /" | tee -a "$OUT/stats.log"
done
h200_oracle "$R31" 31102 "real31k centred fp16, default" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, default" --center --precision fp16
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, default" --precision fp32
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
