#!/usr/bin/env bash
# GPU machine, repo root, .gl/ carried (.gl/bin/cm2_probe.gz, .gl/cm2_gemm.spv): EPI 16, the
# library filter's epilogue (row minimum, up to 8 band entries a row by shared atomics and
# stores, band words to device memory), beside EPI 15 and EPI 2, on the three shapes, with a few
# tile shapes.
source bench/h200-env.sh
gunzip -f .gl/bin/cm2_probe.gz; chmod +x .gl/bin/cm2_probe
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
P=.gl/bin/cm2_probe; S=.gl/cm2_gemm.spv
quiet() { grep -v "creating\|uploading\|uploaded\|device created\|flexible\|features\|properties"; }
A="256:256:128:64:15 256:256:128:64:2 256:256:128:64:16 256:256:128:32:16 256:128:128:64:16 128:128:128:64:16"
timeout 120 $P $S 3584 8359 768 40 $A 2>&1 | quiet
timeout 120 $P $S 3584 65536 768 8 $A 2>&1 | quiet
timeout 120 $P $S 1024 1048576 384 8 $A 2>&1 | quiet
