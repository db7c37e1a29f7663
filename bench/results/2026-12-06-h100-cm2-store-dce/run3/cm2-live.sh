#!/usr/bin/env bash
# GPU machine, repo root, .gl/ carried (.gl/bin/cm2_probe.gz, .gl/cm2_gemm.spv from
# bench/cm2/build.sh): is EPI 0's "GEMM alone" dead code? EPI 14 keeps one element an
# invocation at an index the compiler cannot know; EPI 15 sums every element (unrolled); beside
# EPI 0 and the filter-shaped EPI 2 / 7, on the seed, N = 65,536 and 1 M shapes.
source bench/h200-env.sh
gunzip -f .gl/bin/cm2_probe.gz; chmod +x .gl/bin/cm2_probe
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
P=.gl/bin/cm2_probe; S=.gl/cm2_gemm.spv
quiet() { grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties"; }
A="256:256:128:64:0 256:256:128:64:14 256:256:128:64:15 256:256:128:32:0 256:256:128:32:14 256:256:128:64:2 256:256:128:32:2 256:256:128:64:7 128:64:128:32:0 128:64:128:32:14"
timeout 120 $P $S 3584 8359 768 40 $A 2>&1 | quiet
timeout 120 $P $S 3584 65536 768 8 $A 2>&1 | quiet
timeout 120 $P $S 1024 1048576 384 8 $A 2>&1 | quiet
