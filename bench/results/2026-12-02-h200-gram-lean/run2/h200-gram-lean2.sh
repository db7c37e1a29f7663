#!/usr/bin/env bash
# Which part of 00cc367's leaner hot loop spilled (run 1, bench/h200-gram-lean.sh: 496 bytes of
# local memory an invocation at 512 against 192, and 2.2-2.8x slower): this tree's bench_gram
# with the timing variants `prevloop` (prev marked by a compare in the update, as before, instead
# of by its lane in a branch) and `nosh0` (no unshifted branch), both, and neither; the old
# binary (c2a8438) beside. real31k (2,048 full), the fortunes' and the peer's whole caches, and
# the driver's statistics of each variant. GPU machine, repo root, .gl/ carried. $OUT/lean2.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/lean2.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
V=c,prevloop,nosh0,prevloop+nosh0
g() { local v=$1; shift; timeout 200 $B/$v "$@" 2>&1 | tee -a "$L"; }
DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 132 --steps 50 --judge-variants $V --label stats 2>&1 | tee -a "$OUT/stats.log"
DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --starts 264 --steps 50 --judge-variants $V --label stats 2>&1 | tee -a "$OUT/stats.log"
g bench_gram_old --table "$R31" --center --precisions fp16 --starts 2048 --label "old real31k 2048 full"
g bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --judge-variants $V --label "new real31k 2048 full"
g bench_gram_old --table "$T/seed.npy" --precisions fp32 --label "old peer whole"
g bench_gram --table "$T/seed.npy" --precisions fp32 --judge-variants $V --label "new peer whole"
g bench_gram_old --table "$FORT" --center --precisions fp16 --label "old fortunes whole"
g bench_gram --table "$FORT" --center --precisions fp16 --judge-variants $V --label "new fortunes whole"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
