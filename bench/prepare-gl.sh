#!/usr/bin/env bash
# Prepares the ignored folder .gl/ that bench/h200.sh expects on the GPU machine (carry it with
# the repository): release builds of the examples in .gl/bin (bench, bench_gram, bench_knn, bench_ivf, rankings, sequences, check), LuaJIT and the Lua module (.gl/bin/luajit, .gl/lua/diversity.so) and the
# real fortunes table as .gl/data/fortunes-minilm.f32 (14,943 × 384 float32, row-major, from
# $FORTUNES_DIR, default /work/shared/data/fortunes-minilm) with its meta.json beside it.
# .gl/ must be ignored (/.gl/ in .git/info/exclude); the .debs in .gl/ are not made here.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${FORTUNES_DIR:-/work/shared/data/fortunes-minilm}
git check-ignore -q .gl/ || { echo ".gl/ is not ignored: add /.gl/ to .git/info/exclude" >&2; exit 1; }
mkdir -p .gl/bin .gl/data
want=$((14943 * 384 * 4))
got=$(stat -c %s "$SRC/embeddings.f32")
[ "$got" -eq "$want" ] || { echo "$SRC/embeddings.f32: $got bytes, expected $want" >&2; exit 1; }
install -m 0644 "$SRC/embeddings.f32" .gl/data/fortunes-minilm.f32
install -m 0644 "$SRC/meta.json" .gl/data/fortunes-minilm.meta.json
cargo build --release --examples
TARGET=${CARGO_TARGET_DIR:-target}
for b in bench bench_gram bench_knn bench_ivf rankings sequences check; do
  cp "$TARGET/release/examples/$b" .gl/bin/$b
  strip .gl/bin/$b 2>/dev/null || true
done
# The LuaJIT driver on the GPU machine (bench/h200-multi.sh): Debian's luajit (needs only libc)
# and the module.
bash scripts/build-lua.sh
mkdir -p .gl/lua
install -m 0755 /usr/bin/luajit .gl/bin/luajit
install -m 0644 target/lua/diversity.so .gl/lua/diversity.so
du -sh .gl
