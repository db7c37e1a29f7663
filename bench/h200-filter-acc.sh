#!/usr/bin/env bash
# The tensor-core filter's epilogue on the accumulator fragments (.gl/bin/bench_acc, built with
# DIVERSITY_SHADER_DEFINES=FILTER_ACC_EPI=1; shaders/filter_block.glsl) against main's staged
# epilogue (.gl/bin/bench), each twice alternating, Block128 beside bench_acc's first run of each
# table (its same-bits check); seed (8,359 x 768, 3,584 x 500), N = 65,536 x 768 (3,584 x 500),
# N = 1,048,576 x 384 (1,024 x 100); fp16, untiled. Then a --probe run of each binary on the seed
# (the staged products against fp32, block 0's band records against float64 keys, the filter and
# judge phases in µs a step; bench_acc's with Block128 beside it too).
# bench_acc is untested on a GPU until this runs: a "same bits: NO", "differs from the reference"
# or "miss block 0's best" line in acc.log means the variant is wrong. Repo root, .gl/ carried.
# Writes $OUT/acc.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/acc.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for v in bench bench_acc; do
  [ -x $B/$v ] || { echo "missing $B/$v" | tee -a "$L"; exit 1; }
done
run() {
  local tab=$1 dim=$2 st=$3 sp=$4 ch=$5 lab=$6
  local i=0 v k
  for v in bench bench_acc bench bench_acc; do
    k=coopmat
    # Block128 beside the variant's first run: its same-bits check.
    [ $i = 1 ] && k=block128,coopmat
    i=$((i + 1))
    echo "== $(date +%T) $v $lab ($k)" | tee -a "$L"
    timeout 90 $B/$v --table "$tab" --dim "$dim" --starts "$st" --steps "$sp" --chunk "$ch" --precisions fp16 \
      --kernels "$k" --shapes untiled --quick --label "$v $lab" 2>&1 | tee -a "$L"
  done
}
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
# The variant first: a pipeline that fails to build or a wrong first step shows at once.
for v in bench_acc bench; do
  timeout 30 $B/$v --table "$T/seed.f32" --dim 768 --starts 3584 --steps 200 --chunk 50 --precisions fp16 \
    --kernels coopmat --shapes untiled --quick --label "warm-up $v" 2>&1 | tail -3 | tee -a "$L"
done
run "$T/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
for v in bench bench_acc; do
  k=coopmat
  [ $v = bench_acc ] && k=block128,coopmat
  echo "== $(date +%T) probe $v seed ($k)" | tee -a "$L"
  timeout 120 $B/$v --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 --precisions fp16 \
    --kernels "$k" --shapes untiled --quick --probe --label "probe $v seed" 2>&1 | tee -a "$L"
done
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n.f32" > /dev/null
run "$T/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
rm -f "$T/n.f32"
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
run "$T/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
