#!/usr/bin/env bash
# Run 2: the gram issue's three tables at full size on the default build with ivec4 row loads
# (.gl/bin/bench_gram, .gl/bin/sequences: this tree, G rows padded to a multiple of 4 entries)
# against 42da49d (.gl/bin/bench_gram_head: the shaders of HEAD before this change), alternating
# twice on the peer (8,359 × 768 fp32) and the fortunes centred (14,943 × 384 fp16) whole caches
# and real31k's 2,048 full sequences, every sequence compared; real31k's whole cache by bench_gram
# (one batch) on both builds, then as the `sequences` example writes it (new build); row loads
# a group and workgroup sizes on the new build; the registers of both; the float64 oracle on 16
# spread full sequences of each table (new build). GPU machine, repo root, .gl/ carried; two
# calls: `gram-vec-rows.sh rows` (the rows and real31k's whole cache) and `… rest`.
set -uo pipefail
PART=${1:-rows}
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/rows.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
h200_gram_tables "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 2048 --steps 400 --label warm-up > /dev/null 2>&1
g() { local v=$1 tag=$2; shift 2; echo "== $(date +%T) $v $tag $*" >> "$L"; timeout 150 $B/$v "$@" --label "$v $tag" 2>&1 | grep -E "GPU .* s " | sed "s/^/$v $tag: /" | tee -a "$L"; }
if [ "$PART" = rows ]; then
for i in 1 2; do
  for v in bench_gram_head bench_gram; do g $v "peer$i" --table "$T/seed.npy" --precisions fp32 --seqs "$T/p-$v.u32"; done
  for v in bench_gram_head bench_gram; do g $v "fort$i" --table "$FORT" --center --precisions fp16 --seqs "$T/f-$v.u32"; done
  for v in bench_gram_head bench_gram; do g $v "r31k2048-$i" --table "$R31" --center --precisions fp16 --starts 2048 --seqs "$T/r-$v.u32"; done
done
for p in p f r; do cmp "$T/$p-bench_gram_head.u32" "$T/$p-bench_gram.u32" && echo "same bits: $p" | tee -a "$L" || echo "DIFFERENT bits: $p" | tee -a "$L"; done
rm -f "$T"/*.u32
for v in bench_gram_head bench_gram; do g $v "r31k-whole" --table "$R31" --center --precisions fp16 --seqs "$T/w-$v.u32"; done
cmp "$T/w-bench_gram_head.u32" "$T/w-bench_gram.u32" && echo "same bits: real31k whole" | tee -a "$L" || echo "DIFFERENT bits: real31k whole" | tee -a "$L"
rm -f "$T"/*.u32
/usr/bin/time -v timeout 200 $B/sequences --table "$R31" --mode gram --center --precision fp16 \
  --out "$T/r31.json" 2>&1 | grep -E "GPU|Maximum resident|Elapsed" | tee -a "$OUT/whole.log"
ls -la "$T/r31.json" | tee -a "$OUT/whole.log"; rm -f "$T/r31.json"
else
g bench_gram "fort loads" --table "$FORT" --center --precisions fp16 --starts 4096 --loads 4,8,16
g bench_gram "fort wg" --table "$FORT" --center --precisions fp16 --starts 4096 --wg 256,512
g bench_gram "r31k loads" --table "$R31" --center --precisions fp16 --starts 2048 --loads 8,16,32,64
g bench_gram "r31k wg" --table "$R31" --center --precisions fp16 --starts 2048 --wg 512,1024
g bench_gram "peer loads" --table "$T/seed.npy" --precisions fp32 --loads 4,8,16
for v in bench_gram_head bench_gram; do
  DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/$v --table "$FORT" --center --precisions fp16 --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed" | sed "s/^/$v fortunes: /" | tee -a "$OUT/stats.log"
  DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/$v --table "$R31" --center --precisions fp16 --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed" | sed "s/^/$v real31k: /" | tee -a "$OUT/stats.log"
  DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/$v --table "$T/seed.npy" --precisions fp32 --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed" | sed "s/^/$v peer: /" | tee -a "$OUT/stats.log"
done
h200_oracle "$R31" 31102 "real31k centred fp16, default" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, default" --center --precision fp16
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, default" --precision fp32
fi
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
