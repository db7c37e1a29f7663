#!/usr/bin/env bash
# The GPU benchmark run (SPEC §Performance), on the GPU machine from the repo root, with release
# builds of examples/bench in .gl/bin and Debian's libvulkan1 + libglvnd .debs in .gl (see
# BENCHMARKS.md). Writes to $OUT: the seed benchmark (the peer's synthetic 8,359 × 768 table,
# 3,584 sequences × 500 steps) for every scan shape × pipelining × precision and its picture, the
# same at N = 65,536 (quick set), the whole cache of the seed table in one configuration, and the
# PyTorch peer on the same tables (peer.log).
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONUNBUFFERED=1
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32"
timeout 300 .gl/bin/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
  --label "seed 8359x768, 3584 x 500" --json "$OUT/seed.json" --md "$OUT/seed.md" \
  --plot "$OUT/seed.png"
timeout 150 .gl/bin/bench --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
  --quick --label "N 65536x768, 3584 x 500" --md "$OUT/n65536.md"
# The whole cache of the seed table (8,359 sequences × 8,358 steps), one scan configuration.
timeout 200 .gl/bin/bench --table "$T/seed.f32" --dim 768 --chunk 500 --quick --shapes tiled \
  --precisions fp16 --label "whole cache 8359x768" --md "$OUT/whole.md"
{
  python3 bench/peer/torch_diversity.py --parts seed
  timeout 120 python3 bench/peer/torch_diversity.py --n 65536 --parts seed
} 2>&1 | tee "$OUT/peer.log"
