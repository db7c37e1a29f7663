#!/usr/bin/env bash
# GPU machine, repo root, .gl/ carried (.gl/bin/cm2_probe.gz, .gl/cm2_gemm.spv): the fifth probe
# run: the reduction and the hit paths at BK = 64 (EPI 2, 3, 4, 7; each warmed for 0.3 s) beside
# the GEMM alone (EPI 0), on the seed and 1 M shapes.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
P=.gl/bin/cm2_probe; S=.gl/cm2_gemm.spv
CFGS="256:256:128:64:0 256:256:128:64:2 256:256:128:64:4 256:256:128:64:7 256:256:128:32:7 256:256:128:64:3 256:128:128:64:2 256:128:128:64:7"
timeout 150 $P $S 3584 8359 768 40 $CFGS 2>&1 | grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties" | tee "$OUT/seed.log"
timeout 150 $P $S 1024 1048576 384 8 $CFGS 2>&1 | grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties" | tee "$OUT/big.log"
nvidia-smi --query-gpu=clocks.sm --format=csv | tee -a "$OUT/gpu.txt"
