#!/usr/bin/env bash
# Builds a crate that depends on diversity the way a user's would (`cargo add --path`), with the
# README's Rust example as its main.rs, and runs it from the repository root (it reads
# data/fortunes-2k.npy). Proves the crate links on its own (its build script gets glslang through
# the glslang-link crate, not through any configuration of this repository's). Shares the repository's target directory,
# so diversity and its dependencies are not compiled a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cargo new --quiet --vcs none --name readme_example "$dir/readme-example"
cd "$dir/readme-example"
cargo add --quiet --offline --path "$repo" diversity 2>/dev/null || cargo add --quiet --path "$repo" diversity
# diversity's own release profile, so that its compiled units are the ones already in target/.
printf '\n[profile.release]\ndebug = 1\n' >>Cargo.toml
# The README's one ```rust block, verbatim.
awk '/^```rust$/ {on = 1; next} on && /^```$/ {exit} on {print}' "$repo/README.md" >src/main.rs
grep -q '^fn main' src/main.rs || { echo "README.md: no complete \`\`\`rust block with fn main" >&2; exit 1; }
CARGO_TARGET_DIR="$repo/target" cargo build --release --quiet
cd "$repo"
"$repo/target/release/readme_example"
