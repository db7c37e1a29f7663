#!/usr/bin/env bash
# GPU machine, repo root, .gl/ carried (.gl/bin/cm2_probe.gz and bench.gz, .gl/cm2_gemm.spv from
# bench/cm2/build.sh): the filter's GEMM shape through VK_NV_cooperative_matrix2, tile sizes and
# epilogues, on the seed shape (3,584 centroids × 8,359 rows × 768) and the 1 M shape
# (1,024 × 1,048,576 × 384); then today's filter on the seed table (--probe: its µs a step) for
# comparison in the same lease.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
P=.gl/bin/cm2_probe; S=.gl/cm2_gemm.spv; T=$(mktemp -d)
CFGS="128:64:128:32:0 128:64:128:32:2 256:128:128:32:0 256:128:128:32:1 256:128:128:32:2 256:128:128:32:0:0 256:128:128:32:2:0 256:128:128:64:0 256:128:256:32:0 256:128:256:32:2 256:128:256:32:2:0 256:256:128:32:0 256:256:128:32:2 128:128:128:32:0 128:128:128:32:2 256:64:256:32:0"
timeout 200 $P $S 3584 8359 768 40 $CFGS 2>&1 | tee "$OUT/seed.log"
timeout 200 $P $S 1024 1048576 384 8 $CFGS 2>&1 | tee "$OUT/big.log"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
timeout 90 .gl/bin/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 100 --chunk 50 --precisions fp16 \
  --shapes untiled --quick --kernels block128,coopmat,coopmat --probe --label seed 2>&1 \
  | grep -E "^  (block128|coopmat|phases)|differs|rror" | tee "$OUT/filter.log"
nvidia-smi --query-gpu=clocks.sm --format=csv | tee -a "$OUT/gpu.txt"
# Issue 32 beside it: a chosen candidate's Gram-row value not loaded (GF_SKIP_CHOSEN,
# .gl/bin/bench_gram_skip) against the default (.gl/bin/bench_gram), alternating, whole caches of
# the peer table (fp32) and the fortunes (centred, fp16), every sequence compared.
mkdir -p "$OUT/gram"; L=$OUT/gram/gram.log
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
h200_seed_npy "$T"
timeout 60 .gl/bin/bench_gram --table "$T/fortunes.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { local v=$1; shift; timeout 100 .gl/bin/$v "$@" 2>&1 | grep -v "G (fixed" | tee -a "$L"; }
for i in 1 2; do
  g bench_gram --table "$T/seed.npy" --precisions fp32 --label "default peer whole" --seqs "$T/p$i.u32"
  g bench_gram_skip --table "$T/seed.npy" --precisions fp32 --label "skip-chosen peer whole" --seqs "$T/ps$i.u32"
  g bench_gram --table "$T/fortunes.npy" --center --precisions fp16 --label "default fortunes whole" --seqs "$T/f$i.u32"
  g bench_gram_skip --table "$T/fortunes.npy" --center --precisions fp16 --label "skip-chosen fortunes whole" --seqs "$T/fs$i.u32"
done
for f in p2 ps1 ps2; do cmp "$T/p1.u32" "$T/$f.u32" && echo "same bits: peer $f" | tee -a "$L" || echo "DIFFERENT bits: peer $f" | tee -a "$L"; done
for f in f2 fs1 fs2; do cmp "$T/f1.u32" "$T/$f.u32" && echo "same bits: fortunes $f" | tee -a "$L" || echo "DIFFERENT bits: fortunes $f" | tee -a "$L"; done
DIVERSITY_PIPELINE_STATS=1 timeout 60 .gl/bin/bench_gram_skip --table "$T/fortunes.npy" --center --precisions fp16 --starts 132 --steps 20 --label stats 2>&1 | grep -E "gram_fixed" | awk '!seen[$0]++' | tee -a "$L"
rm -rf "$T"
