#!/usr/bin/env bash
# The judge's workgroup size (bench --workgroup W: ScanOptions::workgroup_size, the judge's for
# the filter kernels; the library's default is 128): the judge's time a step by --probe on the
# seed table (3,584 × 100), then the scan's three rows with W = 128, 64, 32 and 256, each process
# with Block128 first as the same-bits reference and coopmat twice (the second warm). GPU
# machine, repo root, .gl/ carried (.gl/bin/bench.gz). $OUT/probe.log, $OUT/rows.log.
set -uo pipefail
source bench/h200-env.sh
gunzip -f .gl/bin/bench.gz; chmod +x .gl/bin/bench
B=.gl/bin/bench
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
row() {  # table dim starts steps chunk label
  local a="--table $1 --dim $2 --starts $3 --steps $4 --chunk $5 --precisions fp16 --shapes untiled --quick"
  if [ "$2" = 768 ] && [ "$3" = 3584 ] && [ ! -e "$T/probed" ]; then
    touch "$T/probed"
    for w in 128 64 32 256 16; do
      echo "== $(date +%T) probe, workgroup $w" | tee -a "$OUT/probe.log"
      timeout 60 $B --table "$1" --dim 768 --starts 3584 --steps 100 --chunk 50 --precisions fp16 --shapes untiled --quick \
        --kernels coopmat,coopmat --probe --workgroup $w --label "probe $w" 2>&1 | grep -E "^  (coopmat|phases)|rror" | tail -2 | tee -a "$OUT/probe.log"
    done
  fi
  for w in 128 64 32 256; do
    echo "== $(date +%T) $6, workgroup $w" | tee -a "$OUT/rows.log"
    DIVERSITY_PIPELINE_STATS=1 timeout 100 $B $a --kernels block128,coopmat,coopmat --workgroup $w --label "$6 wg $w" 2>&1 \
      | grep -E "^  (block128|coopmat)|differs|rror|statistics \(scan_judge_tc," | awk '!/statistics/ || !seen[$0]++' | tee -a "$OUT/rows.log"
  done
}
h200_scan_rows "$T" row
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$OUT/rows.log"
