#!/usr/bin/env bash
# The test command (README.md, .ci/run): installs what is missing, checks formatting and lints,
# then runs every test on the machine's Vulkan device (lavapipe without a GPU) with validation
# layers on, and the scan tests once more with lavapipe's subgroup size at 4.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
cargo fmt --check
cargo clippy --release --all-targets --quiet -- -D warnings
cargo test --release
LP_NATIVE_VECTOR_WIDTH=128 cargo test --release --test scan
