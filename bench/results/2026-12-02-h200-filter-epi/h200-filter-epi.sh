#!/usr/bin/env bash
# Kept with its log (binaries of 2327f12 and that tree with filter-epi2.diff). The tensor-core
# filter's epilogue cost by subtraction, on the GPU machine (repo root, .gl/
# carried): bench (main), bench_epi0 (main + filter-epi2.diff: the dry-run flag present, unset),
# bench_epi2 (the same with `#define FILTER_PROF_EPI2 1` first in shaders/filter_block.glsl: each
# stage's epilogue runs a second time with its band writes discarded). fp16, untiled, --probe
# (the filter's µs a step); Block128 beside bench_epi2 for the same-bits column. $OUT/epi.log.
set -uo pipefail
source bench/h200-env.sh  # from the repo root
B=.gl/bin
T=$(mktemp -d)
L=$OUT/epi.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
run() {
  local tab=$1 dim=$2 st=$3 sp=$4 ch=$5 lab=$6
  for v in bench bench_epi0 bench_epi2; do
    local k=coopmat
    [ $v = bench_epi2 ] && k=block128,coopmat
    timeout 60 $B/$v --table "$tab" --dim "$dim" --starts "$st" --steps "$sp" --chunk "$ch" --precisions fp16 \
      --kernels "$k" --shapes untiled --quick --probe --label "$v $lab" 2>&1 | tee -a "$L"
  done
}
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
timeout 30 $B/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 200 --chunk 50 --precisions fp16 \
  --kernels coopmat --shapes untiled --quick --label warm-up > /dev/null 2>&1
run "$T/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n.f32" > /dev/null
run "$T/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
rm -f "$T/n.f32"
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
run "$T/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
echo "== $(date +%T) done" | tee -a "$L"
