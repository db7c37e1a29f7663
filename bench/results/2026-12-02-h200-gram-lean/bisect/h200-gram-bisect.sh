#!/usr/bin/env bash
# Bisecting run 1's slowdown (bench/h200-gram-lean.sh): .gl/bis/bg_<v>, bench_gram built with
# DIVERSITY_SHADER_DEFINES naming gram_fixed.comp's GF_* switches: base (every switch at c2a8438's
# code) and base with one switch on each (sg: the settling tree on shuffles; p1: r != rp in the
# update; p2: prev's lane marks it first; sh0: the unshifted branch; bir: the best tracked as r;
# unc: loads unclamped but the last; ev: e_prev's dimensions loaded after the update). real31k
# (2,048 full) and the peer's whole cache, the driver's statistics, the same bits across all.
# GPU machine, repo root, .gl/ carried. $OUT/bisect.log, $OUT/stats.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bis
T=$(mktemp -d)
L=$OUT/bisect.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
R31=$T/real31k.npy
python3 bench/make-real31k.py "$T/fortunes.npy" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bg_base --table "$T/fortunes.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
V="base sg p1 p2 sh0 bir unc ev"
for v in $V; do
  DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bg_$v --table "$R31" --center --precisions fp16 --starts 132 --steps 20 --label "stats $v" 2>&1 | grep "gram_fixed" | sed "s/^/$v /" | tee -a "$OUT/stats.log"
  DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bg_$v --table "$T/seed.npy" --precisions fp32 --starts 264 --steps 20 --label "stats $v" 2>&1 | grep "gram_fixed" | sed "s/^/$v /" | tee -a "$OUT/stats.log"
done
for v in $V; do
  timeout 100 $B/bg_$v --table "$R31" --center --precisions fp16 --starts 2048 --label "$v real31k 2048 full" --seqs "$T/$v-r31.u32" 2>&1 | tee -a "$L"
  timeout 100 $B/bg_$v --table "$T/seed.npy" --precisions fp32 --label "$v peer whole" --seqs "$T/$v-peer.u32" 2>&1 | tee -a "$L"
done
for v in $V; do for t in r31 peer; do
  cmp -s "$T/base-$t.u32" "$T/$v-$t.u32" && echo "same bits as base: $v $t" | tee -a "$L" || echo "DIFFERENT from base: $v $t" | tee -a "$L"
done; done
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
