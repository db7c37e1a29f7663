#!/usr/bin/env bash
# The gram judge's workgroup size: the judge's kernel holds more registers (the driver's
# statistics, bench/h200-pipeline-stats.sh), so its best workgroup may differ from the engine's.
# Peer 8,359 × 768 whole cache and the fortunes (2,048 sequences × 4,000 steps), compensated and
# plain, with the judge, at several workgroup sizes, statistics printed. On the GPU machine from
# the repo root with .gl/ carried. Writes $OUT/wg.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
B=.gl/bin
T=$(mktemp -d)
L=$OUT/wg.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L"
h200_seed_npy "$T"
export DIVERSITY_PIPELINE_STATS=1
timeout 200 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 1 \
  --wg 128,256,512,1024 --placements registers --label "peer whole cache, judge" 2>&1 | grep -v "^ *fp.. G:" | tee -a "$L"
timeout 200 $B/bench_gram --table .gl/data/fortunes-minilm.npy --center --precisions fp16 --starts 2048 --steps 4000 \
  --compensated 1,0 --judge 0,1 --wg 256,512,1024 --placements registers --label "fortunes 2048 x 4000, judge" 2>&1 | grep -v "^ *fp.. G:" | tee -a "$L"
