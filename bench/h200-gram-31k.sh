#!/usr/bin/env bash
# The gram engine at N ≈ 31,000 and the judge's cost, on the GPU machine (repo root, .gl/
# carried as for bench/h200-gram-judge.sh). Writes to $OUT (packed into gram-31k.tgz):
#   p31k_3000.log   real31k centred fp16: the first 3,000 steps of 15,551 sequences (half the
#                   whole cache: the device holds 17,048 next to G) in registers and in memory,
#                   compensated and plain sums
#   p31k_full.log   the same 15,551 sequences at full length, registers, compensated (half the
#                   whole cache's GPU time)
#   seed.log        the peer's 8,359 × 768 whole cache, fp32 and fp16, summations × judge
#   fortunes.log    the fortunes' whole cache, centred fp16, judge off and on
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack gram-31k
B=.gl/bin
T=$(mktemp -d)
R31=.gl/data/real31k.npy
FORT=.gl/data/fortunes-minilm.npy
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
(while sleep 2; do nvidia-smi --query-gpu=clocks.sm --format=csv,noheader; done) > "$OUT/clock.log" 2>&1 &
CLK=$!
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$R31" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
timeout 300 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 15551 --steps 3000 --wg 1024 \
  --placements registers,memory --compensated 1,0 --judge 0 --label "real31k centred fp16, 15551 x 3000" \
  2>&1 | tee "$OUT/p31k_3000.log"
[ -n "${SKIP_SMALL:-}" ] || {
timeout 200 $B/bench_gram --table "$T/seed.npy" --precisions fp32,fp16 --compensated 1,0 --judge 0,1 \
  --label "peer 8359x768 whole cache" 2>&1 | tee "$OUT/seed.log"
timeout 200 $B/bench_gram --table "$FORT" --center --precisions fp16 --judge 0,1 \
  --label "fortunes 14943 centred whole cache" 2>&1 | tee "$OUT/fortunes.log"
}
timeout 200 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 15551 --wg 1024 \
  --placements registers --judge 0 --label "real31k centred fp16, 15551 x full" 2>&1 | tee "$OUT/p31k_full.log"
kill $CLK
