#!/usr/bin/env bash
# The judge: its commit's bookkeeping by atomics nothing waits for, and the filter's first stage
# loads issued before the block's setup loads (bench: the working tree's default build), against
# 9f97288's default (bench_9f); the judge reading candidate rows in place (bench_jr0:
# JUDGE_ROWS=0) or staging one at a time (bench_jr1), which leaves it less shared memory; the
# judge's and the filter's clock profiles (bench_jclk: JUDGE_CLOCK, bench_clock: FILTER_CLOCK);
# the pipelines' statistics (bench, DIVERSITY_PIPELINE_STATS). --probe: each job's phases a step.
# Block128 first in bench's and bench_jr0's processes (the same-bits reference); three coopmat
# samples each, the later two warm. GPU machine, repo root, .gl/ carried (binaries gzipped).
# $OUT/judge.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/judge.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
row() {  # table dim starts steps chunk label
  local a="--table $1 --dim $2 --starts $3 --steps $4 --chunk $5 --precisions fp16 --shapes untiled --quick"
  local b k
  for b in bench_9f bench bench_jr0 bench_jr1; do
    echo "== $(date +%T) $b $6" | tee -a "$L"
    k=coopmat,coopmat,coopmat
    case $b in bench|bench_jr0) k=block128,$k;; esac
    DIVERSITY_PIPELINE_STATS=1 timeout 90 $B/$b $a --kernels $k --probe --label "$b $6" 2>&1 \
      | grep -E "^  (block128|coopmat|phases)|differs|rror|statistics \(scan_(filter_tc|judge_tc)," | awk '!/statistics/ || !seen[$0]++' | tee -a "$L"
  done
  echo "== $(date +%T) bench_jclk $6" | tee -a "$L"
  DIVERSITY_SHADER_CLOCK=1 timeout 90 $B/bench_jclk $a --kernels coopmat,coopmat --label "jclk $6" 2>&1 | grep -E "^  (coopmat|judge clock)|rror" | tee -a "$L"
  echo "== $(date +%T) bench_clock $6" | tee -a "$L"
  DIVERSITY_SHADER_CLOCK=1 timeout 90 $B/bench_clock $a --kernels coopmat,coopmat --label "clock $6" 2>&1 | grep -E "^  (coopmat|clock)|rror" | tee -a "$L"
}
h200_scan_rows "$T" row
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
