#!/usr/bin/env bash
# The main job on the bundled data: diversity sequences for all 2,048 fortunes (fp16 storage,
# in-shader tiles), on the best Vulkan device here (lavapipe without a GPU). On lavapipe the
# scan engine manages a few hundred sequence-steps a second, so the demo computes the first
# STEPS steps of every sequence (default 8; STEPS=2047 gives full sequences on a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
STEPS="${STEPS:-8}"
mkdir -p out
cargo run --release --quiet --example sequences -- \
  --table data/fortunes-2k.npy --precision fp16 --shape tiled --tile 512 \
  --starts all --steps "$STEPS" --chunk 4 --pipelined \
  --out out/fortunes-2k.sequences.json
echo "result: $(pwd)/out/fortunes-2k.sequences.json (texts: data/fortunes-2k.texts.jsonl, line i = row i)"
