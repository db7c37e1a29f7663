#!/usr/bin/env bash
# The tensor-core scan's rows of BENCHMARKS.md in one run on the GPU machine, from the repo root
# with .gl/ carried (.gl/bin/bench built from this tree, the loader .debs): the seed benchmark
# (8,359 x 768, 3,584 x 500, fp32 and fp16) and N = 65,536 x 768 (3,584 x 500, fp16), Block128
# beside the coopmat kernel (same-bits column) with --probe (per-phase times); then
# bench/h200-large.sh (N = 1,048,576 x 384 beside the PyTorch peer). Outputs in $OUT
# (rows.log, large.tgz).
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
B=.gl/bin/bench
T=$(mktemp -d)
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32" > /dev/null
DIVERSITY_PIPELINE_STATS=1 timeout 100 $B --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
  --kernels block128,coopmat --shapes untiled --quick --probe --label "seed 8359x768, 3584 x 500" \
  2>&1 | grep -v "pipeline statistics (scan_\(big\|init\|ftable\|prep\)" | tee "$OUT/rows.log"
timeout 100 $B --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 --precisions fp16 \
  --kernels block128,coopmat --shapes untiled --quick --probe --label "N 65536x768, 3584 x 500" 2>&1 | tee -a "$OUT/rows.log"
rm -rf "$T"
bash "$(dirname "$0")/h200-large.sh"
