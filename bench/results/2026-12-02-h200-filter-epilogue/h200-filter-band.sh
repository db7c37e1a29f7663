#!/usr/bin/env bash
# The epilogue's band entries with one atomicAdd an (element, row tile) for the slots of its
# in-band columns, issued before any entry is written (bench: the working tree's default build),
# against one atomicAdd a candidate, each waited for by its store (bench_old: 0f95148's default),
# and the clock split of the new one (bench_clock: FILTER_CLOCK). Block128 first in bench (the
# same-bits reference); three coopmat samples each. GPU machine, repo root, .gl/ carried
# (binaries gzipped). $OUT/band.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/band.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
run() {  # table dim starts steps chunk label
  local a="--table $1 --dim $2 --starts $3 --steps $4 --chunk $5 --precisions fp16 --shapes untiled --quick"
  echo "== $(date +%T) bench_old $6" | tee -a "$L"
  timeout 60 $B/bench_old $a --kernels coopmat,coopmat,coopmat --label "old $6" 2>&1 | grep -E "^  (coopmat)|rror" | tee -a "$L"
  echo "== $(date +%T) bench $6" | tee -a "$L"
  timeout 60 $B/bench $a --kernels block128,coopmat,coopmat,coopmat --label "$6" 2>&1 | grep -E "^  (block128|coopmat)|differs|rror" | tee -a "$L"
  echo "== $(date +%T) bench_clock $6" | tee -a "$L"
  DIVERSITY_SHADER_CLOCK=1 timeout 60 $B/bench_clock $a --kernels coopmat,coopmat --label "clock $6" 2>&1 | grep -E "^  (coopmat|clock)|rror" | tee -a "$L"
}
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
run "$T/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
timeout 60 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
run "$T/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
rm -f "$T/big.f32"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n.f32" > /dev/null
run "$T/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
