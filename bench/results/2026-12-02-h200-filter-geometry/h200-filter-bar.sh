#!/usr/bin/env bash
# Do the filter's workgroup barriers cost their buffer semantics? Every barrier of the
# tensor-core filter makes shared and buffer memory available and visible (WG_BARRIER); the
# k-stages need shared memory only. bench_sbar: the k-stages' barriers with shared semantics
# alone (FILTER_SHARED_BAR); bench_sball: every barrier of the filter so
# (FILTER_SHARED_BAR_ALL); bench: today's. Three coopmat samples each after Block128 (the same-bits
# reference) in one process; then the clock profile (FILTER_CLOCK) of today's and of
# FILTER_SHARED_BAR (bench_clock, bench_sbarc; DIVERSITY_SHADER_CLOCK=1, two samples, the second
# read). Binaries: bench built from this tree with those DIVERSITY_SHADER_DEFINES, gzipped in
# .gl/bin. GPU machine, repo root, .gl/ carried. $OUT/filter-bar.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/filter-bar.log
V="bench bench_sbar bench_sball"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
for v in $V bench_clock bench_sbarc; do
  echo "== $(date +%T) warm-up $v" | tee -a "$L"
  DIVERSITY_SHADER_CLOCK=1 DIVERSITY_PIPELINE_STATS=1 timeout 30 $B/$v --table "$T/seed.f32" --dim 768 --starts 3584 --steps 300 \
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
  for v in bench_clock bench_sbarc; do
    echo "== $(date +%T) $v $lab" | tee -a "$L"
    DIVERSITY_SHADER_CLOCK=1 timeout 150 $B/$v --table "$tab" --dim "$dim" --starts "$st" --steps "$sp" --chunk "$ch" \
      --precisions fp16 --kernels coopmat,coopmat --shapes untiled --quick --label "$v $lab" 2>&1 \
      | grep -E "^  (coopmat|clock)|differs|rror" | tee -a "$L"
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
