#!/usr/bin/env bash
# Builds the LuaJIT module and leaves it at target/lua/diversity.so, so that from the repo root
#   LUA_CPATH='target/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit -e 'require "diversity"'
# works.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --features lua --lib
# A cdylib's file name carries no hash of its features: a later build without `lua` (cargo test
# --lib, say) overwrites it while cargo still counts the lua build as fresh. Rebuild when the
# library lacks the module's entry point.
if ! nm -D --defined-only target/release/libdiversity.so | grep -q ' luaopen_diversity$'; then
  touch src/lib.rs
  cargo build --release --quiet --features lua --lib
  nm -D --defined-only target/release/libdiversity.so | grep -q ' luaopen_diversity$' \
    || { echo "build-lua.sh: target/release/libdiversity.so has no luaopen_diversity" >&2; exit 1; }
fi
mkdir -p target/lua
# Copy, then rename: a LuaJIT that has the old file mapped keeps it (overwriting in place would
# crash it with SIGBUS).
cp target/release/libdiversity.so target/lua/.diversity.so.tmp
mv -f target/lua/.diversity.so.tmp target/lua/diversity.so
