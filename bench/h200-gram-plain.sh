#!/usr/bin/env bash
# Third gram run: plain sums without lo registers (commit after 9056819), whole caches only, no
# oracle (the plain arithmetic is unchanged). Setup as bench/h200-gram.sh.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack gram-plain-results
G=.gl/bin/bench_gram
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 40 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
timeout 60 $G --table "$T/seed.f32" --dim 768 --precisions fp32 --wg 256,512,1024 \
  --placements registers --compensated 1,0 --label "gram whole cache 8359x768" \
  --json "$OUT/whole.json" --md "$OUT/whole.md" 2>&1 | tee "$OUT/whole.log"
timeout 80 $G --table .gl/data/fortunes-minilm.f32 --dim 384 --center --precisions fp32 \
  --wg 512,1024 --placements registers --compensated 0,1 \
  --label "gram whole cache fortunes 14943x384, centered" --json "$OUT/fortunes.json" \
  --md "$OUT/fortunes.md" 2>&1 | tee "$OUT/fortunes.log"
