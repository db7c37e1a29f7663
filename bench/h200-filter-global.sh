#!/usr/bin/env bash
# The tensor-core filter with its fragments loaded straight from device memory (FILTER_GLOBAL 1:
# .gl/bin/bench_glob) beside main's staged operands (.gl/bin/bench), Block128 beside them for the
# same-bits column; the seed (3,584 x 500), N = 65,536 x 768 and N = 1,048,576 x 384 (1,024 x
# 100). On the GPU machine from the repo root with .gl/ carried; outputs in $OUT/global.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
B=.gl/bin
T=$(mktemp -d)
L=$OUT/global.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
timeout 30 $B/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 200 --chunk 50 --precisions fp16 \
  --kernels coopmat --shapes untiled --quick --label warm-up > /dev/null 2>&1
timeout 40 $B/bench_glob --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
  --kernels block128,coopmat --shapes untiled --quick --label "bench_glob seed 8359x768, 3584 x 500" 2>&1 | tee -a "$L"
timeout 20 $B/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
  --kernels coopmat --shapes untiled --quick --label "bench seed 8359x768, 3584 x 500" 2>&1 | tee -a "$L"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32" > /dev/null
timeout 40 $B/bench_glob --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 --precisions fp16 \
  --kernels block128,coopmat --shapes untiled --quick --label "bench_glob N 65536x768, 3584 x 500" 2>&1 | tee -a "$L"
rm -f "$T/n65536.f32"
timeout 60 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
timeout 40 $B/bench_glob --table "$T/big.f32" --dim 384 --precisions fp16 --starts 1024 --steps 100 --chunk 100 \
  --kernels block128,coopmat --shapes untiled --quick --label "bench_glob N 1048576 x 384 fp16, 1024 x 100" 2>&1 | tee -a "$L"
