#!/usr/bin/env bash
# Scan-engine throughput on the machine's default Vulkan device (lavapipe without a GPU) for the
# bundled data: every shape × pipelining × fp32/fp16, the first 256 fortunes as starts, 8 steps,
# all 2,048 rows as candidates. Prints the table (also written to bench/results/lavapipe.md).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --example bench
mkdir -p bench/results
# --tile-bytes: the driver's tile, 85% of the 2 MiB L2 lavapipe reports.
./target/release/examples/bench --table data/fortunes-2k.npy --starts 256 --steps 8 --chunk 4 \
  --tile-bytes 1782579 \
  --label "lavapipe, fortunes 2048x384, 256 x 8" --md bench/results/lavapipe.md
