#!/usr/bin/env bash
# This stop's default build (stages of 96 dims, no register prefetch, the judge staging two
# rows) against Block128 in every shape (untiled, tiled, per tile) and both precisions, on the
# seed table and on tables whose D leaves a partial stage (D = 100: stages [0, 96) and [96, 112);
# D = 40: one stage of 48 of 96 dims). Same-bits column: each configuration against the first
# (Block128 fp32). GPU machine, repo root, .gl/ carried (binaries gzipped). $OUT/shapes.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/shapes.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
run() {  # table dim starts steps label
  echo "== $(date +%T) $5" | tee -a "$L"
  timeout 120 $B/bench --table "$1" --dim "$2" --starts "$3" --steps "$4" --chunk 25 --precisions fp32,fp16 \
    --kernels block128,coopmat --quick --label "$5" 2>&1 | grep -E "^  (block128|coopmat)|differs|rror" | tee -a "$L"
}
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" >/dev/null
run "$T/seed.f32" 768 3584 200 "seed 8359x768, 3584 x 200"
timeout 60 python3 bench/peer/torch_diversity.py --n 20000 --d 100 --dump "$T/d100.f32" >/dev/null
run "$T/d100.f32" 100 1000 200 "N 20000 x 100, 1000 x 200"
timeout 60 python3 bench/peer/torch_diversity.py --n 20000 --d 40 --dump "$T/d40.f32" >/dev/null
run "$T/d40.f32" 40 1000 200 "N 20000 x 40, 1000 x 200"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
