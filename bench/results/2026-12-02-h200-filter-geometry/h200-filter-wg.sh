#!/usr/bin/env bash
# The tensor-core filter with eight subgroups a workgroup (FILTER_WG 256: blocks of 128 × 128,
# each staged operand row serving 128 rows of the other operand where 64 × 128 blocks serve 64
# and 128) against today's four (64 × 128), and eight subgroups of one row tile each (FILTER_TI 1:
# 64 × 128 blocks, half the accumulators, more resident warps). Every binary runs Block128 first
# and reports "same bits" against it. bench_wg256c is the 256 build with FILTER_CLOCK (the
# phase split). Binaries in .gl/bin (built from this tree with DIVERSITY_SHADER_DEFINES, see
# the record's README). Then the gram occupancy test (bench/h200-gram-occupancy-test.sh).
# GPU machine, repo root, .gl/ carried. $OUT/filter-wg.log (and the occupancy test's logs).
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/filter-wg.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
for v in bench bench_wg256 bench_ti1 bench_wg256sk32; do
  echo "== $(date +%T) warm-up $v" | tee -a "$L"
  DIVERSITY_PIPELINE_STATS=1 timeout 30 $B/$v --table "$T/seed.f32" --dim 768 --starts 3584 --steps 100 \
    --chunk 50 --precisions fp16 --kernels coopmat --shapes untiled --quick --label "warm-up $v" 2>&1 | grep -i "filter\|regist\|GPU" | tee -a "$L"
done
run() {  # table dim starts steps chunk label
  local tab=$1 dim=$2 st=$3 sp=$4 ch=$5 lab=$6
  for v in bench bench_wg256 bench_ti1 bench_wg256sk32 bench_wg256c; do
    local k=block128,coopmat extra=""
    [ $v = bench_wg256c ] && extra="--probe" && export DIVERSITY_SHADER_CLOCK=1
    echo "== $(date +%T) $v $lab" | tee -a "$L"
    timeout 120 $B/$v --table "$tab" --dim "$dim" --starts "$st" --steps "$sp" --chunk "$ch" \
      --precisions fp16 --kernels $k --shapes untiled --quick $extra --label "$v $lab" 2>&1 \
      | grep -v "^|" | tee -a "$L"
    unset DIVERSITY_SHADER_CLOCK
  done
}
run "$T/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n.f32" > /dev/null
run "$T/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
rm -f "$T/n.f32"
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
run "$T/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
rm -rf "$T"
echo "== $(date +%T) filter done" | tee -a "$L"
bash bench/h200-gram-occupancy-test.sh
bash bench/h200-gram-hybrid.sh
