#!/usr/bin/env bash
# Registers and time of the tensor-core filter's staging variants (DIVERSITY_PIPELINE_STATS):
# bench = the working tree's default (stages of 64 dims, the next stage's loads one stage ahead
# in registers); bench_np64 / bench_np32 = no register prefetch (FILTER_PREFETCH=0), stages of 64
# / 32 dims; bench_sk32 = stages of 32 dims with prefetch; bench_db32 / bench_db48 = two stage
# buffers (FILTER_DBUF=1) of 32 / 48 dims; bench_jr2 = the judge staging two candidate rows at
# a time (JUDGE_ROWS=2). The seed and N = 1,048,576 rows (h200_scan_rows; N = 65,536 skipped).
# Block128 first in bench's process; three coopmat samples each, the later two warm; the
# variants' "same bits" compare with their own first sample. GPU machine, repo root, .gl/
# carried (binaries gzipped). $OUT/regs.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/regs.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
row() {  # table dim starts steps chunk label
  case "$6" in "N 65536"*) return;; esac
  local a="--table $1 --dim $2 --starts $3 --steps $4 --chunk $5 --precisions fp16 --shapes untiled --quick"
  local b k
  for b in bench bench_np64 bench_np32 bench_sk32 bench_db32 bench_db48 bench_jr2; do
    echo "== $(date +%T) $b $6" | tee -a "$L"
    k=coopmat,coopmat,coopmat; [ $b = bench ] && k=block128,$k
    DIVERSITY_PIPELINE_STATS=1 timeout 90 $B/$b $a --kernels $k --label "$b $6" 2>&1 \
      | grep -E "^  (block128|coopmat)|differs|rror|statistics \(scan_(filter_tc|judge_tc)," | awk '!/statistics/ || !seen[$0]++' | tee -a "$L"
  done
}
h200_scan_rows "$T" row
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
