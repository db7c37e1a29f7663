#!/usr/bin/env bash
# Gram engine (fixed-point keys): a lane's Gram-row values loaded as ivec4 / ivec2 (GF_VEC; a
# lane then holds runs of adjacent keys) and its top-2 split into two chains (GF_OFFER_CHAINS),
# against the default build of the same tree (base) and of 42da49d (head): whole caches of the
# peer table (first 8,356 rows: GF_VEC needs N a multiple of 4 as built here) and the fortunes
# centred (first 14,940), real31k centred (first 31,100) 2,048 full sequences; alternating twice;
# every sequence compared between builds; the registers of each build. GPU machine, repo root,
# .gl/ carried. $OUT/rows.log, $OUT/stats.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/rows.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
h200_gram_tables "$T"
python3 -c "
import numpy as np
np.save('$T/p4.npy', np.load('$T/seed.npy')[:8356])
np.save('$T/f4.npy', np.load('$T/fortunes.npy')[:14940])
np.save('$T/r4.npy', np.load('$T/real31k.npy')[:31100])"
timeout 60 $B/bench_gram_base --table "$T/f4.npy" --starts 2048 --steps 400 --label warm-up > /dev/null 2>&1
g() { local v=$1 tag=$2; shift 2; echo "== $(date +%T) $v $tag $*" >> "$L"; timeout 90 $B/$v "$@" --label "$v $tag" 2>&1 | grep -E "GPU .* s " | sed "s/^/$v $tag: /" | tee -a "$L"; }
V="head base v4 v2 oc2 v4oc2"
for i in 1 2; do
  for v in $V; do g bench_gram_$v "peer$i" --table "$T/p4.npy" --precisions fp32 --seqs "$T/p-$v.u32"; done
  for v in $V; do g bench_gram_$v "fort$i" --table "$T/f4.npy" --center --precisions fp16 --seqs "$T/f-$v.u32"; done
  for v in $V; do g bench_gram_$v "r31k$i" --table "$T/r4.npy" --center --precisions fp16 --starts 2048 --seqs "$T/r-$v.u32"; done
done
for p in p f r; do for v in $V; do cmp "$T/$p-head.u32" "$T/$p-$v.u32" && echo "same bits: $p $v" | tee -a "$L" || echo "DIFFERENT bits: $p $v" | tee -a "$L"; done; done
rm -f "$T"/*.u32
# More vector loads in flight (keys a group: 16 and 32 at GF_VEC 4) on the two larger tables.
for v in v4 v4oc2; do
  g bench_gram_$v "fort loads" --table "$T/f4.npy" --center --precisions fp16 --loads 8,16,32
  g bench_gram_$v "r31k loads" --table "$T/r4.npy" --center --precisions fp16 --starts 2048 --loads 16,32,64
done
for v in $V; do
  for t in p4 f4 r4; do
    c="--center --precisions fp16"; [ $t = p4 ] && c="--precisions fp32"
    DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram_$v --table "$T/$t.npy" $c --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed" | sed "s/^/$v $t: /" | tee -a "$OUT/stats.log"
  done
done
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
