#!/usr/bin/env bash
# The Lua driver's whole cache of the 31,102-row real table on the GPU machine (repo root, .gl/
# carried as for bench/h200-gram-judge.sh): peak resident memory with the default host budget
# (the smaller of 2 GiB and a quarter of RAM), GPU and wall time, the cache's size. Writes
# $OUT/host31k.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/host31k.log"
python3 - <<'PY' 2>&1 | tee -a "$OUT/host31k.log"
import os, resource, subprocess, time
env = dict(os.environ, LUA_CPATH=".gl/lua/?.so;;", LUA_PATH="lua/?.lua;lua/?/init.lua;;")
cmd = [".gl/bin/luajit", "lua/diversity/cli.lua", "--embeddings", ".gl/data/real31k.npy", "--center",
       "--out", "/tmp/r31.json"]
t = time.time()
p = subprocess.run(cmd, env=env, capture_output=True, text=True)
print(" ".join(cmd[2:]), "exit", p.returncode, "wall %.1f s" % (time.time() - t))
print(p.stderr[-1500:])
print(p.stdout[-800:])
print("peak RSS", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, "MiB")
print("cache bytes", os.path.getsize("/tmp/r31.json") if os.path.exists("/tmp/r31.json") else None)
PY
