#!/usr/bin/env bash
# The gram engine's exactness at scale and its speed with the judge, on the GPU machine, from the
# repo root with .gl/ carried (bench/prepare-gl.sh, the Vulkan loader .debs, and the table
# .gl/data/real31k.npy: the 14,943 fortunes plus perturbed copies, 31,102 × 384 fp16, made by
# bench/make-real31k.py). Writes to $OUT (packed into gram-judge.tgz):
#   oracle.log     16 spread starts, full length, judge on and off: the float64 ε-oracle on the
#                  GPU (bench/seq_oracle.py, torch) — real31k centred fp16 (the user's settings),
#                  the fortunes centred fp16 and fp32, the peer's 8,359 × 768 table
#   speed_*.log    bench_gram: real31k, 1,000 steps of all 31,102 sequences, placements ×
#                  summations × judge; whole caches of the peer table and the fortunes; the 31k
#                  whole cache in two configurations; the torch gram peer on the peer table
#   host_rss.log   the Lua driver's peak resident memory on real31k (3,000 steps) with the
#                  default host budget and with --host-memory 300M
set -uo pipefail
START=$SECONDS
step() { echo "== $(date +%T) +$((SECONDS - START)) s: $*" | tee -a "$OUT/steps.log"; }
source "$(dirname "$0")/h200-env.sh"
h200_pack gram-judge
B=.gl/bin
T=$(mktemp -d)
R31=.gl/data/real31k.npy
FORT=.gl/data/fortunes-minilm.npy
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
(while sleep 2; do nvidia-smi --query-gpu=clocks.sm --format=csv,noheader; done) > "$OUT/clock.log" 2>&1 &
CLK=$!
step "tables"
h200_seed_npy "$T"
spread() { python3 -c "n=$1; print(','.join(str(i * (n - 1) // 15) for i in range(16)))"; }
step "warm-up"
timeout 60 $B/bench_gram --table "$R31" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1

step "exactness: 16 spread starts, full length, judge on and off"
oracle() { # table n flags... ; label
  local tab=$1 n=$2 label=$3; shift 3
  for j in judge no-judge; do  # the judge is opt-in (--judge)
    local extra=""; [ $j = judge ] && extra="--judge"
    timeout 120 $B/sequences --table "$tab" --mode gram --starts "$(spread $n)" $extra "$@" \
      --out "$T/o.json" 2>&1 | tail -1 | tee -a "$OUT/oracle.log"
    local cflags=""; for f in "$@"; do case $f in --center) cflags="$cflags --center";; fp16|fp32) cflags="$cflags --precision $f";; esac; done
    echo "-- $label, $j" | tee -a "$OUT/oracle.log"
    timeout 300 python3 bench/seq_oracle.py "$tab" "$T/o.json" $cflags --device cuda --batch 16 2>&1 | tee -a "$OUT/oracle.log"
  done
}
oracle "$R31" 31102 "real31k centred fp16" --center --precision fp16
oracle "$FORT" 14943 "fortunes centred fp16" --center --precision fp16
oracle "$FORT" 14943 "fortunes centred fp32" --center --precision fp32
oracle "$T/seed.npy" 8359 "peer 8359x768 fp32" --precision fp32

step "speed: real31k, 1,000 steps of every sequence"
timeout 400 $B/bench_gram --table "$R31" --center --precisions fp16 --steps 1000 --wg 1024 \
  --placements registers,memory --compensated 1,0 --judge 1,0 --label "real31k centred fp16, 1000 steps" \
  --md "$OUT/speed_31k_1000.md" 2>&1 | tee "$OUT/speed_31k_1000.log"
step "speed: peer table whole cache"
timeout 200 $B/bench_gram --table "$T/seed.npy" --precisions fp32,fp16 --compensated 1,0 --judge 1,0 \
  --label "peer 8359x768 whole cache" --md "$OUT/speed_seed.md" 2>&1 | tee "$OUT/speed_seed.log"
timeout 200 python3 bench/peer/torch_diversity.py --parts none --full-gram 2>&1 | tail -3 | tee -a "$OUT/speed_seed.log"
step "speed: fortunes whole cache, centred"
timeout 200 $B/bench_gram --table "$FORT" --center --precisions fp16,fp32 --judge 1,0 \
  --label "fortunes 14943 centred whole cache" --md "$OUT/speed_fortunes.md" 2>&1 | tee "$OUT/speed_fortunes.log"
step "speed: real31k whole cache, registers, judge, plain and compensated"
timeout 300 $B/bench_gram --table "$R31" --center --precisions fp16 --wg 1024 --placements registers \
  --compensated 0,1 --label "real31k centred fp16 whole cache" --md "$OUT/speed_31k_whole.md" 2>&1 | tee "$OUT/speed_31k_whole.log"

step "host memory: the driver on real31k, 3,000 steps"
for hm in "" "--host-memory 300M"; do
  python3 - "$hm" <<'PY' 2>&1 | tee -a "$OUT/host_rss.log"
import resource, subprocess, sys, os
extra = sys.argv[1].split()
env = dict(os.environ, LUA_CPATH=".gl/lua/?.so;;", LUA_PATH="lua/?.lua;lua/?/init.lua;;")
cmd = [".gl/bin/luajit", "lua/diversity/cli.lua", "--embeddings", ".gl/data/real31k.npy", "--center",
       "--top-k", "3000", "--out", "/tmp/r31.json", "--quiet"] + extra
p = subprocess.run(cmd, env=env, capture_output=True, text=True)
print(" ".join(cmd[2:]), "exit", p.returncode, p.stderr[-400:])
print("peak RSS", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, "MiB")
PY
done
kill $CLK
step "done"
