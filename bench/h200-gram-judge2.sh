#!/usr/bin/env bash
# The rebuilt judge (cooperative fresh keys, the bound against exact keys) and register loads in
# groups, on the GPU machine from the repo root with .gl/ carried (bench/prepare-gl.sh: bin/,
# data/fortunes-minilm.npy, the Vulkan loader .debs). real31k is made here by
# bench/make-real31k.py. Writes to $OUT (packed into gram-judge2.tgz):
#   r31k_speed.log  real31k centred fp16, the first 2,048 sequences at full length (31,101
#                   steps), registers: summations × judge × loads (0 = the default, 32 = all)
#   r31k_half.log   15,551 sequences at full length (half the whole cache) in the default-to-be
#   small.log       whole caches of the peer table (8,359 × 768 fp32) and the fortunes (centred
#                   fp16), summations × judge; the torch gram peer on the peer table
#   oracle.log      16 spread starts at full length with the judge, float64 oracle on the GPU
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack gram-judge2
B=.gl/bin
T=$(mktemp -d)
FORT=.gl/data/fortunes-minilm.npy
R31=$T/real31k.npy
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
git log -1 --format=%H > "$OUT/commit.txt" 2>/dev/null || true
(while sleep 2; do nvidia-smi --query-gpu=clocks.sm --format=csv,noheader; done) > "$OUT/clock.log" 2>&1 &
CLK=$!
python3 bench/make-real31k.py "$FORT" "$R31" | tee "$OUT/real31k.txt"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$R31" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
[ -n "${SKIP_SPEED:-}" ] || {
timeout 200 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --wg 1024 \
  --placements registers --compensated 0 --judge 0 --loads 0,0,31,16 \
  --label "real31k centred fp16, 2048 x full, loads (0 twice: run to run)" 2>&1 | tee "$OUT/r31k_speed.log"
timeout 200 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --wg 1024 \
  --placements registers --compensated 0 --judge 1 --refresh 0,1024,4096 \
  --label "real31k centred fp16, 2048 x full, plain + judge" 2>&1 | tee -a "$OUT/r31k_speed.log"
timeout 100 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --wg 1024 \
  --placements registers --compensated 1 --judge 1 --refresh 4096 \
  --label "real31k centred fp16, 2048 x full, compensated + judge" 2>&1 | tee -a "$OUT/r31k_speed.log"
}
[ -n "${SKIP_SMALL:-}" ] || {
timeout 120 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 1 --refresh 0,1024 \
  --label "peer 8359x768 whole cache" 2>&1 | tee "$OUT/small.log"
timeout 150 $B/bench_gram --table "$FORT" --center --precisions fp16 --compensated 1,0 --judge 1 --refresh 0,2048 \
  --label "fortunes 14943 centred whole cache" 2>&1 | tee -a "$OUT/small.log"
}
[ -n "${SKIP_ORACLE:-}" ] || {
h200_oracle "$R31" 31102 "real31k centred fp16, plain sums + judge" --center --precision fp16 --judge --plain-sums
h200_oracle "$R31" 31102 "real31k centred fp16, judge" --center --precision fp16 --judge ${ORACLE_FLAGS:-}
h200_oracle "$FORT" 14943 "fortunes centred fp16, judge" --center --precision fp16 --judge ${ORACLE_FLAGS:-}
h200_oracle "$FORT" 14943 "fortunes centred fp32, judge" --center --precision fp32 --judge ${ORACLE_FLAGS:-}
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, judge" --precision fp32 --judge ${ORACLE_FLAGS:-}
}
[ -z "${HALF:-}" ] || timeout 200 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 15551 --wg 1024 \
  --placements registers $HALF --label "real31k centred fp16, 15551 x full" 2>&1 | tee "$OUT/r31k_half.log"
kill $CLK
