#!/usr/bin/env bash
# The final run of the leaner hot loop (the tree's gram_fixed.comp: prev tested as r != rp, the
# best tracked as r, the settling tree on shuffles): .gl/bin/bench_gram (this tree) against
# .gl/bin/bench_gram_old (c2a8438), alternating, on the issue's three tables, every sequence
# compared old/new; 1,024 invocations at real31k; the driver's register statistics; the float64
# oracle on 16 spread full sequences of each table; the first half of real31k's whole cache.
# GPU machine, repo root, .gl/ carried. PART=ab|var|oracle|half|all (default all).
# $OUT/lean.log, $OUT/oracle.log, $OUT/stats.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/lean.log
PART=${PART:-all}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { local v=$1; shift; timeout 200 $B/$v "$@" 2>&1 | tee -a "$L"; }
case $PART in ab|all)
i=0
for v in bench_gram_old bench_gram bench_gram_old bench_gram; do
  i=$((i + 1))
  g $v --table "$R31" --center --precisions fp16 --starts 2048 --label "$v real31k 2048 full" --seqs "$T/$v-$i-r31.u32"
  g $v --table "$FORT" --center --precisions fp16 --label "$v fortunes centred fp16 whole cache" --seqs "$T/$v-$i-fort.u32"
  g $v --table "$T/seed.npy" --precisions fp32 --label "$v peer 8359x768 fp32 whole cache" --seqs "$T/$v-$i-peer.u32"
done
# The same bits, old against new, every sequence of every table.
for t in r31 fort peer; do
  cmp "$T/bench_gram_old-1-$t.u32" "$T/bench_gram-2-$t.u32" && cmp "$T/bench_gram-2-$t.u32" "$T/bench_gram-4-$t.u32" \
    && echo "same bits old/new/new again: $t ($(stat -c %s "$T/bench_gram-2-$t.u32") bytes)" | tee -a "$L" \
    || echo "DIFFERENT bits old/new: $t" | tee -a "$L"
done;; esac
case $PART in var|all)
g bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --wg 512,1024 --label "new real31k 2048 full, wg"


g bench_gram --table "$T/seed.npy" --precisions fp32 --judge-variants nosettle --label "new peer, settling compiled out"

DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 132 --steps 50 --wg 512,1024 --label stats 2>&1 | tee -a "$OUT/stats.log"
DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --starts 264 --steps 50 --label stats 2>&1 | tee -a "$OUT/stats.log"
;; esac
case $PART in oracle|all)
h200_oracle "$R31" 31102 "real31k centred fp16, default" --center --precision fp16
h200_oracle "$FORT" 14943 "fortunes centred fp16, default" --center --precision fp16
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, default" --precision fp32
;; esac
case $PART in half|all)
g bench_gram --table "$R31" --center --precisions fp16 --starts 15551 \
  --label "real31k first half of the whole cache (15,551 full sequences), default";;
esac
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
