#!/usr/bin/env bash
# GPU machine, repo root, .gl/ carried
# (.gl/bin/cm2_probe.gz and bench.gz, .gl/cm2_gemm.spv and .gl/cm2_stream.spv from
# bench/cm2/build.sh): the keys written to device memory by the GEMM (EPI 9 fp32, EPI 10 fp16),
# then each row's minimum and band by a plain streaming kernel (CM2_STREAM), timed together,
# beside the GEMM alone (EPI 0) and the keys alone (EPI 4), on the seed and 1 M shapes (EPI 9 at
# 1 M needs 4 GiB of keys and is skipped); then today's filter in the same lease.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
P=.gl/bin/cm2_probe; S=.gl/cm2_gemm.spv; T=$(mktemp -d)
# First the GEMM halves alone (EPI 0 / 4 / 9 / 10), then EPI 9 / 10 followed by the stream.
ALONE="256:256:128:64:0 256:256:128:64:4 256:256:128:64:9 256:256:128:64:10 256:256:128:32:10 256:128:128:64:10"
WITH="256:256:128:64:9 256:256:128:64:10 256:256:128:32:10 256:128:128:64:10"
quiet() { grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties"; }
timeout 100 $P $S 3584 8359 768 40 $ALONE 2>&1 | quiet | tee "$OUT/seed.log"
CM2_STREAM=.gl/cm2_stream.spv timeout 100 $P $S 3584 8359 768 40 $WITH 2>&1 | quiet | tee -a "$OUT/seed.log"
timeout 100 $P $S 1024 1048576 384 8 $ALONE 2>&1 | quiet | tee "$OUT/big.log"
CM2_STREAM=.gl/cm2_stream.spv timeout 100 $P $S 1024 1048576 384 8 $WITH 2>&1 | quiet | tee -a "$OUT/big.log"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
timeout 90 .gl/bin/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 100 --chunk 50 --precisions fp16 \
  --shapes untiled --quick --kernels coopmat,coopmat,coopmat --probe --label seed 2>&1 \
  | grep -E "^  (coopmat|phases)|differs|rror" | tee "$OUT/filter.log"
rm -rf "$T"
