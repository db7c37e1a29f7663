#!/usr/bin/env bash
# GPU machine, repo root, .gl/ carried (.gl/bin/cm2_probe.gz, .gl/cm2_gemm.spv): the sixth probe
# run: EPI 8 (a threshold's hits found by a second, small tensor-core product that turns each
# row's flags into exact bit masks) beside the GEMM alone (EPI 0), the keys alone (EPI 4) and
# the reduction (EPI 2), on the seed and 1 M shapes; each configuration warmed for 0.3 s.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
P=.gl/bin/cm2_probe; S=.gl/cm2_gemm.spv
CFGS="256:256:128:64:0 256:256:128:64:4 256:256:128:64:8 256:256:128:32:8 256:128:128:64:8 256:128:128:32:8 256:128:256:32:8 256:256:128:32:2 256:256:128:32:3"
timeout 150 $P $S 3584 8359 768 40 $CFGS 2>&1 | grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties" | tee "$OUT/seed.log"
timeout 150 $P $S 1024 1048576 384 8 $CFGS 2>&1 | grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties" | tee "$OUT/big.log"
nvidia-smi --query-gpu=clocks.sm --format=csv | tee -a "$OUT/gpu.txt"
