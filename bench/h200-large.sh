#!/usr/bin/env bash
# The tensor-core scan on a table the gram engine cannot hold, beside the PyTorch peer in one
# run: N = 1,048,576 x 384 (the peer's clustered generator, seed 7), fp16 storage, 1,024 starts
# x 100 steps, Block128 and Coopmat (same-bits column against Block128), then the peer's scan in
# fp32, TF32 and fp16 inputs (one matmul a step), and its float64 check on 32 sequences x 100
# steps (how far each peer is from exact). Also the seed benchmark again with the pipeline
# statistics. On the GPU machine from the repo root with .gl/ prepared (bench/prepare-gl.sh).
# Results packed into $OUT/large.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack large
B=.gl/bin/bench
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
N=${N:-1048576}
timeout 120 python3 bench/peer/torch_diversity.py --n "$N" --d 384 --dump "$T/big.f32" | tee "$OUT/steps.log"
echo "== $(date +%T) ours" | tee -a "$OUT/steps.log"
DIVERSITY_PIPELINE_STATS=1 timeout 240 $B --table "$T/big.f32" --dim 384 --precisions fp16 --starts 1024 --steps 100 --chunk 100 \
  --kernels block128,coopmat --shapes untiled --quick --probe --label "N $N x 384 fp16, 1024 x 100" \
  --json "$OUT/large.json" --md "$OUT/large.md" 2>&1 | tee "$OUT/large.log"
echo "== $(date +%T) peer" | tee -a "$OUT/steps.log"
timeout 300 python3 bench/peer/torch_diversity.py --data "$T/big.f32" --n "$N" --d 384 --starts 1024 --steps 100 \
  --no-gram --ref-steps 100 --parts seed,ref 2>&1 | tee "$OUT/peer_large.log"
echo "== $(date +%T) done" | tee -a "$OUT/steps.log"
