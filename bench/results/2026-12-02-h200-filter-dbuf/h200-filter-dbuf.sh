#!/usr/bin/env bash
# The tensor-core filter with two stage buffers (one workgroup barrier a stage: FILTER_DBUF=1,
# stages of 32 or 48 dims), with its k-steps unrolled (FILTER_UNROLL), against the default build;
# the judge's leaner commit and preparation (bench) against the old one (bench_base), each with
# its per-step phases (--probe); the judge's clock profile (bench_jclk: JUDGE_CLOCK).
# Block128 first in every new build's process (the same-bits reference); three coopmat samples
# each, the later two warm. GPU machine, repo root, .gl/ carried (binaries gzipped). $OUT/dbuf.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/dbuf.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
row() {  # table dim starts steps chunk label
  local a="--table $1 --dim $2 --starts $3 --steps $4 --chunk $5 --precisions fp16 --shapes untiled --quick"
  local b
  for b in bench_base bench; do
    echo "== $(date +%T) $b $6" | tee -a "$L"
    local k=coopmat,coopmat,coopmat; [ $b = bench ] && k=block128,$k
    timeout 90 $B/$b $a --kernels $k --probe --label "$b $6" 2>&1 | grep -E "^  (block128|coopmat|phases)|differs|rror" | tee -a "$L"
  done
  for b in bench_db32 bench_db48 bench_unr bench_db32u; do
    echo "== $(date +%T) $b $6" | tee -a "$L"
    timeout 90 $B/$b $a --kernels block128,coopmat,coopmat,coopmat --label "$b $6" 2>&1 | grep -E "^  (block128|coopmat)|differs|rror" | tee -a "$L"
  done
  echo "== $(date +%T) bench_jclk $6" | tee -a "$L"
  DIVERSITY_SHADER_CLOCK=1 timeout 90 $B/bench_jclk $a --kernels coopmat,coopmat --label "jclk $6" 2>&1 | grep -E "^  (coopmat|judge clock)|rror" | tee -a "$L"
}
h200_scan_rows "$T" row
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
