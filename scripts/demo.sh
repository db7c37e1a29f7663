#!/usr/bin/env bash
# The main job on the bundled data, through the Lua command line the user's pipeline keeps:
# the diversity cache of the 300 bundled fortunes (data/fortunes-300.embeddings.json, real
# all-MiniLM-L6-v2 embeddings, ids "fortune-N"), mean-centred, fp16 storage, on the best Vulkan
# device here (lavapipe without a GPU): every sequence, full length (about 20 s on 2 CPU cores
# with lavapipe). TOP_K=K computes only the first K steps of each sequence.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
bash scripts/build-lua.sh
TOP_K_ARG=()
[ -n "${TOP_K:-}" ] && TOP_K_ARG=(--top-k "$TOP_K")
mkdir -p out
cp data/fortunes-300.embeddings.json out/embeddings.json
LUA_CPATH='target/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;' \
  luajit lua/diversity/cli.lua --embeddings out/embeddings.json --out out/diversity_cache.json \
  --center --precision fp16 "${TOP_K_ARG[@]}" --batch 300 \
  --model sentence-transformers/all-MiniLM-L6-v2
echo "result: $(pwd)/out/diversity_cache.json (texts: data/fortunes-2k.texts.jsonl, \"fortune-N\" is line N)"
