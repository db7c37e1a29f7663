#!/usr/bin/env bash
# Where the tensor-core filter's time goes, by subtraction, on the GPU machine (repo root, .gl/
# carried). Every build gives the same bits (each row's same-bits column against Block128 where
# it runs); each profile build runs, inside every filter block, a second pass after the real one
# whose results are discarded, so its extra filter time is that pass's cost:
#   bench_before  main before the pass was factored out (the control for `bench`)
#   bench         main (FILTER_PROF_TWICE unset)
#   bench_prof1   + the whole GEMM again (staging copies, fragment loads, products, stores)
#   bench_prof2   + the GEMM without the staging copies (fragment loads, products, stores)
#   bench_prof3   + the staging alone (no fragment loads or products; stores of zeros)
# (filter-prof-twice.diff applied to 1f0928e+, then `#define FILTER_PROF_TWICE 1u|2u|3u` first in
# shaders/filter_block.glsl; bench_before is the tree without the diff.) Tables: the seed
# (8,359 x 768, 3,584 x 500), N = 65,536 x 768 (3,584 x 500), N = 1,048,576 x 384 (1,024 x 100),
# fp16, untiled, with --probe (per-phase timestamps: the filter's µs a step). $OUT/prof.log.
set -uo pipefail
source bench/h200-env.sh  # from the repo root
B=.gl/bin
T=$(mktemp -d)
L=$OUT/prof.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
run() {  # table dim starts steps chunk label kernels-for-main
  local tab=$1 dim=$2 st=$3 sp=$4 ch=$5 lab=$6
  for v in bench_before bench bench_prof1 bench_prof2 bench_prof3; do
    local k=coopmat
    case $v in bench|bench_prof1) k=block128,coopmat;; esac
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
