#!/usr/bin/env bash
# Second gram run (after bench/h200-gram.sh): G stored with scaled columns (no 1/|e| registers)
# and plain vs compensated sums, on the whole caches; the oracle on each summation. Same setup
# as h200-gram.sh (.gl/ from bench/prepare-gl.sh). Outputs in $OUT/gram-opt-results.tgz.
set -uo pipefail
START=$SECONDS
step() { echo "== $(date +%T) +$((SECONDS - START)) s: $*" | tee -a "$OUT/steps.log"; }
source "$(dirname "$0")/h200-env.sh"
h200_pack gram-opt-results
G=.gl/bin/bench_gram
FORTUNES=.gl/data/fortunes-minilm.f32
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
step "whole cache 8359 x 768"
timeout 150 $G --table "$T/seed.f32" --dim 768 --precisions fp32 --wg 256,512,1024 \
  --placements registers --compensated 1,0 --oracle 16 --e2e "$T/cache.json" \
  --label "gram whole cache 8359x768" --json "$OUT/whole.json" --md "$OUT/whole.md" 2>&1 | tee "$OUT/whole.log"
timeout 60 $G --table "$T/seed.f32" --dim 768 --precisions fp16 --wg 256 --compensated 1,0 \
  --label "gram whole cache 8359x768 fp16" --json "$OUT/whole16.json" --md "$OUT/whole16.md" 2>&1 | tee "$OUT/whole16.log"
step "whole cache fortunes 14943 x 384, centered"
timeout 200 $G --table "$FORTUNES" --dim 384 --center --precisions fp32 --wg 512,1024,256 \
  --placements registers --compensated 1,0 --oracle 16 \
  --label "gram whole cache fortunes 14943x384, centered" --json "$OUT/fortunes.json" \
  --md "$OUT/fortunes.md" 2>&1 | tee "$OUT/fortunes.log"
step "seed workload and N = 65536"
timeout 30 $G --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --precisions fp32 \
  --wg 256,512 --compensated 1,0 --label "gram seed 8359x768, 3584 x 500" \
  --json "$OUT/seed500.json" --md "$OUT/seed500.md" 2>&1 | tee "$OUT/seed500.log"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32"
timeout 60 $G --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --precisions fp32 \
  --wg 1024 --placements memory --compensated 1,0 --label "gram N 65536x768, 3584 x 500" \
  --json "$OUT/n65536.json" --md "$OUT/n65536.md" 2>&1 | tee "$OUT/n65536.log"
step "done"
