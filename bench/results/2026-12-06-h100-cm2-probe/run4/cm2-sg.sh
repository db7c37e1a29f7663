#!/usr/bin/env bash
# GPU machine, repo root, .gl/ carried (.gl/bin/cm2_probe.gz, .gl/cm2_gemm.spv): the fourth probe
# run: subgroup-scope matrices with tensor-layout loads straight from device memory (EPI 6, the
# GEMM alone; each configuration warmed for 0.3 s), beside the best workgroup-scope GEMM (EPI 0),
# on the seed and 1 M shapes.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
P=.gl/bin/cm2_probe; S=.gl/cm2_gemm.spv
CFGS="256:256:128:64:0 128:32:64:16:6 128:32:64:32:6 128:32:64:64:6 128:64:32:32:6 128:64:64:32:6 256:32:64:32:6 256:32:64:64:6 128:16:64:32:6 256:64:64:32:6"
timeout 150 $P $S 3584 8359 768 40 $CFGS 2>&1 | grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties" | tee "$OUT/seed.log"
timeout 150 $P $S 1024 1048576 384 8 $CFGS 2>&1 | grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties" | tee "$OUT/big.log"
nvidia-smi --query-gpu=clocks.sm --format=csv | tee -a "$OUT/gpu.txt"
