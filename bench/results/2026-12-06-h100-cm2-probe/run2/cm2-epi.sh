#!/usr/bin/env bash
# GPU machine, repo root, .gl/ carried (.gl/bin/cm2_probe.gz and bench.gz, .gl/cm2_gemm.spv): the
# second probe run: epilogues without a reduction (EPI 3: a threshold per row known before the
# products; EPI 4: the keys alone) against the GEMM alone (EPI 0) and the reduction (EPI 2), on
# the seed and 1 M shapes; then today's filter on both tables in the same lease (--probe).
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
P=.gl/bin/cm2_probe; S=.gl/cm2_gemm.spv; T=$(mktemp -d)
CFGS="256:256:128:32:0 256:256:128:64:0 256:256:128:32:3 256:256:128:32:4 256:256:128:32:2 256:128:128:32:3 256:128:128:32:4 128:128:128:32:3 128:64:128:32:3 256:128:256:32:3 256:256:128:64:3"
timeout 150 $P $S 3584 8359 768 40 $CFGS 2>&1 | grep -v "creating\|uploading\|uploaded\|device created" | tee "$OUT/seed.log"
timeout 150 $P $S 1024 1048576 384 8 $CFGS 2>&1 | grep -v "creating\|uploading\|uploaded\|device created" | tee "$OUT/big.log"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
timeout 90 .gl/bin/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 100 --chunk 50 --precisions fp16 \
  --shapes untiled --quick --kernels coopmat,coopmat --probe --label seed 2>&1 \
  | grep -E "^  (block128|coopmat|phases)|differs|rror" | tee "$OUT/filter.log"
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
timeout 120 .gl/bin/bench --table "$T/big.f32" --dim 384 --starts 1024 --steps 20 --chunk 20 --precisions fp16 \
  --shapes untiled --quick --kernels coopmat,coopmat --probe --label big 2>&1 \
  | grep -E "^  (block128|coopmat|phases)|differs|rror" | tee -a "$OUT/filter.log"
rm -rf "$T"
nvidia-smi --query-gpu=clocks.sm --format=csv | tee -a "$OUT/gpu.txt"
