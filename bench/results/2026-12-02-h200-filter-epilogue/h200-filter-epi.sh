#!/usr/bin/env bash
# The tensor-core filter's epilogue on the accumulators split by the subgroup clock: keys and
# per-element minima, their reduction to each row's best (with its barrier), the band entries
# (with theirs), the headers (with theirs). .gl/bin/bench_clock is the bench example of this
# tree built with DIVERSITY_SHADER_DEFINES=FILTER_CLOCK (gzipped). Block128 first (the same-bits
# reference), then two coopmat samples (the second on a warm clock); DIVERSITY_SHADER_CLOCK=1.
# GPU machine, repo root, .gl/ carried. $OUT/epi.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/epi.log
export DIVERSITY_SHADER_CLOCK=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
run() {  # table dim starts steps chunk label
  echo "== $(date +%T) $6" | tee -a "$L"
  timeout 150 $B/bench_clock --table "$1" --dim "$2" --starts "$3" --steps "$4" --chunk "$5" \
    --precisions fp16 --kernels block128,coopmat,coopmat --shapes untiled --quick --label "$6" 2>&1 \
    | grep -E "^  (block128|coopmat|clock)|differs|rror" | tee -a "$L"
}
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
run "$T/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n.f32" > /dev/null
run "$T/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
rm -f "$T/n.f32"
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
run "$T/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
