#!/usr/bin/env bash
# The GPU benchmark run (SPEC §Performance), on the GPU machine from the repo root, with release
# builds of examples/bench in .gl/bin and Debian's libvulkan1 + libglvnd .debs in .gl (see
# BENCHMARKS.md). Writes everything to $OUT: the seed benchmark (the peer's synthetic
# 8,359 × 768 table, 3,584 sequences × 500 steps) for every scan shape × pipelining × precision,
# its picture, the same at N = 65,536 (quick set), and the PyTorch peer on the same tables.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONUNBUFFERED=1
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32"
timeout 300 .gl/bin/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
  --label "seed 8359x768, 3584 x 500" --json "$OUT/seed.json" --md "$OUT/seed.md" \
  --plot "$OUT/seed.png" 2>&1 | tee "$OUT/seed.log"
python3 bench/peer/torch_diversity.py --parts seed 2>&1 | tee "$OUT/peer_seed.log"
timeout 150 .gl/bin/bench --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
  --quick --label "N 65536x768, 3584 x 500" --json "$OUT/n65536.json" --md "$OUT/n65536.md" \
  2>&1 | tee "$OUT/n65536.log"
timeout 120 python3 bench/peer/torch_diversity.py --n 65536 --parts seed 2>&1 | tee "$OUT/peer_n65536.log"
# The whole cache of the seed table (8,359 sequences × 8,358 steps), one scan configuration.
timeout 200 .gl/bin/bench --table "$T/seed.f32" --dim 768 --chunk 500 --quick --shapes tiled \
  --precisions fp16 --label "whole cache 8359x768" --json "$OUT/whole.json" --md "$OUT/whole.md" \
  2>&1 | tee "$OUT/whole.log"
