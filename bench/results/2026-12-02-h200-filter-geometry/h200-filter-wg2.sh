#!/usr/bin/env bash
# Repeats of the filter geometries that the first run (h200-filter-wg.sh) left undecided, three
# coopmat samples each after Block128 (its "same bits" reference) in one bench process:
# today's 64 × 128 blocks of four subgroups (bench), 128 × 128 of eight with 32-dim stages
# (bench_wg256sk32), 64 × 128 of eight subgroups of one row tile (bench_ti1, 32-dim stages, 116
# registers), and 128 × 128 of sixteen subgroups of one row tile (bench_wg512ti1). The binaries
# are bench built from this tree with DIVERSITY_SHADER_DEFINES (FILTER_WG, FILTER_TI, FILTER_SK),
# gzipped in .gl/bin. GPU machine, repo root, .gl/ carried. $OUT/filter-wg2.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/filter-wg2.log
V="bench bench_wg256sk32 bench_ti1 bench_wg512ti1"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
for v in $V; do
  echo "== $(date +%T) warm-up $v" | tee -a "$L"
  DIVERSITY_PIPELINE_STATS=1 timeout 30 $B/$v --table "$T/seed.f32" --dim 768 --starts 3584 --steps 300 \
    --chunk 50 --precisions fp16 --kernels coopmat --shapes untiled --quick --label "warm-up $v" 2>&1 | grep -E "scan_filter_tc,|GPU" | tee -a "$L"
done
run() {  # table dim starts steps chunk label
  local tab=$1 dim=$2 st=$3 sp=$4 ch=$5 lab=$6
  for v in $V; do
    echo "== $(date +%T) $v $lab" | tee -a "$L"
    timeout 150 $B/$v --table "$tab" --dim "$dim" --starts "$st" --steps "$sp" --chunk "$ch" \
      --precisions fp16 --kernels block128,coopmat,coopmat,coopmat --shapes untiled --quick --label "$v $lab" 2>&1 \
      | grep -E "^  (block128|coopmat)|differs|rror" | tee -a "$L"
  done
}
run "$T/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n.f32" > /dev/null
run "$T/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
rm -f "$T/n.f32"
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
run "$T/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
