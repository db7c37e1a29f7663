#!/usr/bin/env bash
# The tensor-core filter's stage depth (SK, dims staged through shared memory between two
# barriers; FILTER_SK in shaders/filter_common.glsl): .gl/bin/bench (64, the default) against
# .gl/bin/bench_skK (built with FILTER_SK Ku; BINS names them), with pipeline statistics,
# on the seed benchmark (fp32 and fp16) and the 1,048,576 x 384 table (fp16, 1,024 x 100). Each
# run has Block128 first, so its same-bits column checks the filter. Packed into $OUT/sk.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack sk
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" >/dev/null
timeout 120 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" >/dev/null
for b in ${BINS:-bench bench_sk32 bench_sk16}; do
  echo "== $(date +%T) $b" | tee -a "$OUT/sk.log"
  DIVERSITY_PIPELINE_STATS=1 timeout 120 .gl/bin/$b --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 \
    --chunk 50 --kernels block128,coopmat --shapes untiled --quick --label "$b seed 3584 x 500" 2>&1 \
    | grep -E "scan_filter_tc,|GPU|phases" | tee -a "$OUT/sk.log"
  timeout 120 .gl/bin/$b --table "$T/big.f32" --dim 384 --precisions fp16 --starts 1024 --steps 100 \
    --chunk 100 --kernels block128,coopmat --shapes untiled --quick --label "$b N 1048576, 1024 x 100" 2>&1 \
    | grep -E "GPU|phases" | tee -a "$OUT/sk.log"
done
