#!/usr/bin/env bash
# Installs the rock (diversity-<version>-1.rockspec, the crate's version) into a temporary tree with `luarocks make`, as the
# README says, then, from a directory outside the repository: `diversity --help`, one CLI job on a
# copy of the bundled fortunes, and a one-line `require "diversity"`. Run by scripts/test.sh after
# scripts/build-lua.sh, so cargo has nothing left to compile.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# LuaJIT is the interpreter whatever else is installed (luarocks would wrap the command with lua5.1
# where that exists; the module needs LuaJIT).
printf 'lua_interpreter = "luajit"\nvariables = { LUA_BINDIR = "/usr/bin", LUA_INCDIR = "/usr/include/luajit-2.1" }\n' \
  >"$work/config.lua"
export LUAROCKS_CONFIG="$work/config.lua"
crate_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
rockspec="diversity-$crate_version-1.rockspec"
[ -f "$rockspec" ] || { echo "rock: no $rockspec for the crate's version $crate_version" >&2; exit 1; }
luarocks --lua-version=5.1 --tree "$work/tree" make "$rockspec" >"$work/make.log" 2>&1 \
  || { cat "$work/make.log" >&2; exit 1; }
eval "$(luarocks --lua-version=5.1 --tree "$work/tree" path)"
export PATH="$work/tree/bin:$PATH"
mkdir "$work/run" && cd "$work/run"
diversity --help | grep -q -- "--embeddings FILE" || { echo "rock: diversity --help printed no usage" >&2; exit 1; }
cp "$repo/data/fortunes-300.embeddings.json" e.json
diversity --embeddings e.json --out cache.json --top-k 5 --starts 0,1,2 --quiet >/dev/null
python3 -c 'import json, sys; j = json.load(open("cache.json")); assert len(j["sequences"]["fortune-0"]) == 6, j' \
  || { echo "rock: the CLI job wrote no 6-entry sequence for fortune-0" >&2; exit 1; }
version=$(luajit -e 'print(require("diversity")._VERSION)')
[ "$version" = "diversity $crate_version" ] \
  || { echo "rock: require \"diversity\" from $PWD gave _VERSION '$version'" >&2; exit 1; }
luajit -e 'assert(type(require("diversity.types").open) == "function")' \
  || { echo "rock: the stubs (diversity.types) are not installed" >&2; exit 1; }
echo "rock: installed, diversity --help, one job and require \"diversity\" from outside the repository"
