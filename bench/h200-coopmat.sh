#!/usr/bin/env bash
# The tensor-core scan (ScanKernel::Coopmat) against Block128 on the GPU machine, from the repo
# root, with .gl/ prepared (bench/prepare-gl.sh: .gl/bin/bench, .gl/data/fortunes-minilm.npy,
# .gl/*.deb). Same-bits column: every configuration against the first of its precision
# (Block128 untiled). Results packed into $OUT/coopmat.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack coopmat
B=.gl/bin/bench
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
PARTS=${PARTS:-seed peer fortunes n65536 peer65536 whole}
for part in $PARTS; do
  echo "== $(date +%T) $part" | tee -a "$OUT/steps.log"
  case $part in
  seed)
    timeout 200 $B --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
      --kernels block128,coopmat ${SEED_SHAPES:---shapes untiled,tiled,per-tile --quick} --probe \
      --label "seed 8359x768, 3584 x 500" --json "$OUT/seed.json" --md "$OUT/seed.md" \
      2>&1 | tee "$OUT/seed.log" ;;
  fortunes)
    timeout 150 $B --table .gl/data/fortunes-minilm.npy --center --starts 3584 --steps 500 --chunk 50 \
      --kernels block128,coopmat --shapes untiled --quick --probe --label "fortunes 14943x384 centered, 3584 x 500" \
      --json "$OUT/fortunes.json" --md "$OUT/fortunes.md" 2>&1 | tee "$OUT/fortunes.log" ;;
  n65536)
    timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32"
    timeout 200 $B --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
      --kernels block128,coopmat --shapes untiled --quick --probe --label "N 65536x768, 3584 x 500" \
      --json "$OUT/n65536.json" --md "$OUT/n65536.md" 2>&1 | tee "$OUT/n65536.log" ;;
  peer)
    timeout 120 python3 bench/peer/torch_diversity.py --parts seed 2>&1 | tee "$OUT/peer_seed.log" ;;
  peer65536)
    timeout 120 python3 bench/peer/torch_diversity.py --n 65536 --parts seed 2>&1 | tee "$OUT/peer_n65536.log" ;;
  whole)
    timeout 200 $B --table "$T/seed.f32" --dim 768 --kernels coopmat --precisions fp16 --shapes untiled \
      --quick --chunk 500 --label "whole cache 8359x768" --json "$OUT/whole.json" --md "$OUT/whole.md" \
      2>&1 | tee "$OUT/whole.log" ;;
  esac
done
