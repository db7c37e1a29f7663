#!/usr/bin/env bash
# The tensor-core filter's epilogue with 8 rows a subgroup at a time (.gl/bin/bench_rg8, built with
# DIVERSITY_SHADER_DEFINES=FILTER_RG=8u; shaders/filter_block.glsl) against main's 4
# (.gl/bin/bench), each twice alternating, Block128 beside bench_rg8 (same bits); seed
# (8,359 x 768, 3,584 x 500), N = 65,536 x 768 (3,584 x 500), N = 1,048,576 x 384 (1,024 x 100);
# fp16, untiled. Repo root, .gl/ carried. Writes $OUT/rg8.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/rg8.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for v in bench bench_rg8; do
  [ -x $B/$v ] || { echo "missing $B/$v" | tee -a "$L"; exit 1; }
done
run() {
  local tab=$1 dim=$2 st=$3 sp=$4 ch=$5 lab=$6
  local i=0 v k
  for v in bench bench_rg8 bench bench_rg8; do
    k=coopmat
    # Block128 beside the variant's first run: its same-bits check.
    [ $i = 1 ] && k=block128,coopmat
    i=$((i + 1))
    timeout 90 $B/$v --table "$tab" --dim "$dim" --starts "$st" --steps "$sp" --chunk "$ch" --precisions fp16 \
      --kernels "$k" --shapes untiled --quick --label "$v $lab" 2>&1 | tee -a "$L"
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
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
