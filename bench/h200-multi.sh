#!/usr/bin/env bash
# DEVS (default 0,0) picks the devices of the multi-device runs: DEVS=0,1 on a two-GPU machine.
# Issue 7 on the one-GPU machine: the overhead of two logical devices (the H200 opened twice,
# `--devices 0,0`) against one (`--devices 0`), through the LuaJIT driver as a user runs it, with
# the same --batch so the caches must be byte-identical (`cmp`). From the repo root with .gl/
# carried (bench/prepare-gl.sh: the Vulkan loader .debs, .gl/bin/luajit, .gl/lua/diversity.so).
# Outputs packed into $OUT/multi-results.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack multi-results
export LUA_CPATH='.gl/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;' SOURCE_DATE_EPOCH=1700000000
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
run() { # name, then cli arguments
  local name=$1; shift
  local t0 t1
  t0=$(date +%s%N)
  timeout 300 .gl/bin/luajit lua/diversity/cli.lua --embeddings "$T/seed.f32" --dim 768 --quiet \
    --out "$T/$name.json" "$@" 2>&1 | tee -a "$OUT/multi.log"
  t1=$(date +%s%N)
  echo "$name wall $(( (t1 - t0) / 1000000 )) ms" | tee -a "$OUT/multi.log"
}
for rep in 1 2; do
  run "gram-one-$rep" --mode gram --precision fp32 --batch 2090 --devices 0
  run "gram-two-$rep" --mode gram --precision fp32 --batch 2090 --devices "${DEVS:-0,0}"
  run "scan-one-$rep" --mode scan --precision fp32 --top-k 300 --batch 2090 --devices 0
  run "scan-two-$rep" --mode scan --precision fp32 --top-k 300 --batch 2090 --devices "${DEVS:-0,0}"
done
for m in gram scan; do
  for rep in 1 2; do
    cmp "$T/$m-one-$rep.json" "$T/$m-two-$rep.json" && echo "$m rep $rep: one and two devices byte-identical" | tee -a "$OUT/multi.log"
  done
done
ls -la "$T" | tee -a "$OUT/multi.log"
