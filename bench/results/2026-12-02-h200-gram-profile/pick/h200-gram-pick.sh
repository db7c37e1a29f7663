#!/usr/bin/env bash
# Two build knobs of shaders/gram_fixed.comp (gram-pick2-prefetch.diff beside this script, against 9ea8f96's shader) against the default build of the same tree, one
# alternation: GF_PICK2 (the second best of a pick without the winner's index: two reductions
# side by side instead of three in a row) and GF_PREFETCH (a step's first row loads issued at the
# end of the step before). Binaries .gl/bin/bench_gram_v (default), _vpick2, _vprefetch,
# _vpick2_prefetch, each `DIVERSITY_SHADER_DEFINES=<knobs> cargo build --release --example
# bench_gram`, stripped. The issue's three rows (real31k 2,048 full), every sequence compared.
# GPU machine, repo root, .gl/ carried. $OUT/pick.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/pick.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram_v --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { local v=$1; shift; timeout 100 $B/$v "$@" 2>&1 | grep -v "G (fixed" | tee -a "$L"; }
V="bench_gram_v bench_gram_vpick2 bench_gram_vprefetch bench_gram_vpick2_prefetch"
for v in $V; do g $v --table "$R31" --center --precisions fp16 --starts 2048 --label "$v real31k 2048 full" --seqs "$T/r-$v.u32"; done
for v in $V; do g $v --table "$T/seed.npy" --precisions fp32 --label "$v peer whole" --seqs "$T/p-$v.u32"; done
for v in $V; do g $v --table "$FORT" --center --precisions fp16 --label "$v fortunes whole" --seqs "$T/f-$v.u32"; done
for t in r p f; do for v in $V; do cmp "$T/$t-bench_gram_v.u32" "$T/$t-$v.u32" && echo "same bits: $t $v" | tee -a "$L" || echo "DIFFERENT bits: $t $v" | tee -a "$L"; done; done
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
