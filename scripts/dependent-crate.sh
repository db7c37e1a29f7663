#!/usr/bin/env bash
# Builds a crate that depends on diversity the way a user's would (`cargo add --path`), with every
# ```rust block of README.md and docs/*.md as one of its programs (each a complete main.rs), and
# runs each from the repository root (they read data/). Proves the crate links on its own (its
# build script gets glslang through the glslang-link crate, not through any configuration of this
# repository's). Shares the repository's target directory, so diversity and its dependencies are
# not compiled a second time.
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
# Every ```rust block, verbatim: README.md's as src/main.rs (the binary readme_example), each of
# docs/*.md's as src/bin/<page>-<n>.rs.
rm src/main.rs
mkdir -p src/bin
bins=()
for md in "$repo/README.md" "$repo"/docs/*.md; do
  page=$(basename "$md" .md | tr 'A-Z' 'a-z')
  n=0
  while :; do
    n=$((n + 1))
    out=$(awk -v want="$n" '/^```rust$/ {k++; if (k == want) {on = 1; next}} on && /^```$/ {exit} on {print}' "$md")
    [ -n "$out" ] || break
    grep -q '^fn main' <<<"$out" || { echo "$md: \`\`\`rust block $n has no fn main" >&2; exit 1; }
    if [ "$page" = readme ] && [ "$n" = 1 ]; then name=readme_example; printf '%s\n' "$out" >src/main.rs
    else name="$page-$n"; printf '%s\n' "$out" >"src/bin/$name.rs"; fi
    bins+=("$name")
  done
done
[ -f src/main.rs ] || { echo "README.md: no complete \`\`\`rust block with fn main" >&2; exit 1; }
CARGO_TARGET_DIR="$repo/target" cargo build --release --quiet --bins
cd "$repo"
for b in "${bins[@]}"; do
  "$repo/target/release/$b"
done
