#!/usr/bin/env bash
# Scan-engine throughput on the machine's default Vulkan device (lavapipe without a GPU) for the
# bundled data: every shape × fp32/fp16, all 2,048 starts, the first 4 steps. Prints one summary
# line per run (steps/s, sequence-steps/s, GPU time). Numbers go to BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --example sequences
for p in fp32 fp16; do
  for shape in "untiled" "tiled --tile 512" "per-tile --tile 512"; do
    # shellcheck disable=SC2086
    ./target/release/examples/sequences --table data/fortunes-2k.npy --precision "$p" \
      --shape $shape --starts all --steps 4 --chunk 4 --pipelined --out /tmp/diversity-bench.json
  done
done
rm -f /tmp/diversity-bench.json
