#!/usr/bin/env bash
# A/B on the GPU machine: the gram engine without the judge, at HEAD (.gl/bin/bench_gram) and at
# commit 7bce0f2 (.gl/bin/bench_gram_old), same table (real31k from bench/make-real31k.py),
# 2,048 sequences × 3,000 steps, WG 1,024, registers: compensated and plain sums, each config
# run twice (run-to-run same bits). Writes $OUT/ab.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
T=$(mktemp -d)
R31=$T/real31k.npy
python3 bench/make-real31k.py .gl/data/fortunes-minilm.npy "$R31"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/ab.log"
timeout 60 .gl/bin/bench_gram --table "$R31" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
for b in ${BINS:-bench_gram_old bench_gram bench_gram_old bench_gram}; do
  for c in ${COMPS:-1 0}; do
    timeout 120 .gl/bin/$b --table "$R31" --center --precisions fp16 --starts 2048 --steps 3000 --wg 1024 \
      --placements registers,registers --compensated $c --judge 0 --label "$b compensated $c" 2>&1 \
      | grep -v "^ *fp16 G" | tee -a "$OUT/ab.log"
  done
done
