#!/usr/bin/env bash
# Builds the LuaJIT module and leaves it at target/lua/diversity.so, so that from the repo root
#   LUA_CPATH='target/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit -e 'require "diversity"'
# works.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --features lua --lib
mkdir -p target/lua
# Copy, then rename: a LuaJIT that has the old file mapped keeps it (overwriting in place would
# crash it with SIGBUS).
cp target/release/libdiversity.so target/lua/.diversity.so.tmp
mv -f target/lua/.diversity.so.tmp target/lua/diversity.so
