#!/usr/bin/env bash
# The scan's three rows with this stop's defaults (bench): the filter without the register
# prefetch and with the epilogue as at 586fe62 (151 registers expected, three workgroups an SM),
# the judge staging two candidate rows at a time; stages of 96 dims (bench_sk96: FILTER_SK=96u,
# fewer barriers); the default's filter clock profile (bench_clock: FILTER_CLOCK); registers by
# DIVERSITY_PIPELINE_STATS. Block128 first in bench's and bench_sk96's processes (the same-bits
# reference); three coopmat samples each, the later two warm. GPU machine, repo root, .gl/
# carried (binaries gzipped). $OUT/rows.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/rows.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
row() {  # table dim starts steps chunk label
  local a="--table $1 --dim $2 --starts $3 --steps $4 --chunk $5 --precisions fp16 --shapes untiled --quick"
  local b
  for b in bench bench_sk96; do
    echo "== $(date +%T) $b $6" | tee -a "$L"
    DIVERSITY_PIPELINE_STATS=1 timeout 90 $B/$b $a --kernels block128,coopmat,coopmat,coopmat --label "$b $6" 2>&1 \
      | grep -E "^  (block128|coopmat)|differs|rror|statistics \(scan_(filter_tc|judge_tc)," | awk '!/statistics/ || !seen[$0]++' | tee -a "$L"
  done
  echo "== $(date +%T) bench_clock $6" | tee -a "$L"
  DIVERSITY_SHADER_CLOCK=1 timeout 90 $B/bench_clock $a --kernels coopmat,coopmat --label "clock $6" 2>&1 | grep -E "^  (coopmat|clock)|rror" | tee -a "$L"
}
h200_scan_rows "$T" row
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
