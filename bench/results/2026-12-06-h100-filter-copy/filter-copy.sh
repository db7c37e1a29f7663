#!/usr/bin/env bash
# The scan's three rows with a stage's operand copies in parts (FILTER_COPY_PARTS, fewer loads
# live at once: fewer registers, perhaps three workgroups an SM with 96-dim stages): the default
# (.gl/bin/bench, 1 part), bench_cp2 and bench_cp3, alternating by row; Block128 first in each
# process (the same-bits reference); three coopmat samples each, the later two warm; registers
# by DIVERSITY_PIPELINE_STATS. Then the judge's time a step against the batch (seed table, 50
# steps, --probe): how many judge workgroups an SM run at once. GPU machine, repo root, .gl/
# carried (binaries gzipped). $OUT/rows.log, $OUT/judge.log.
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
  for b in bench bench_cp2 bench_cp3; do
    echo "== $(date +%T) $b $6" | tee -a "$L"
    DIVERSITY_PIPELINE_STATS=1 timeout 90 $B/$b $a --kernels block128,coopmat,coopmat,coopmat --label "$b $6" 2>&1 \
      | grep -E "^  (block128|coopmat)|differs|rror|statistics \(scan_(filter_tc|judge_tc)," | awk '!/statistics/ || !seen[$0]++' | tee -a "$L"
  done
  if [ "$2" = 768 ] && [ "$3" = 3584 ] && [ ! -e "$T/judged" ]; then
    touch "$T/judged"
    for s in 132 264 396 528 792 1056 1584 2112 3584; do
      echo "== $(date +%T) judge, $s sequences" | tee -a "$OUT/judge.log"
      timeout 60 $B/bench --table "$1" --dim 768 --starts $s --steps 50 --chunk 50 --precisions fp16 --shapes untiled --quick \
        --kernels coopmat,coopmat --probe --label "judge $s" 2>&1 | grep -E "^  (coopmat|phases)|rror" | tail -2 | tee -a "$OUT/judge.log"
    done
  fi
}
h200_scan_rows "$T" row
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
