#!/usr/bin/env bash
# The band-limited judge on the GPU machine (repo root, .gl/ carried as for
# bench/h200-gram-judge.sh): its cost beside the default arithmetic on the peer table's and the
# fortunes' whole caches and on 3,000 steps of half the real31k cache, and its exactness on 16
# full real31k sequences. Writes to $OUT (packed into gram-band.tgz).
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack gram-band
B=.gl/bin
T=$(mktemp -d)
R31=.gl/data/real31k.npy
FORT=.gl/data/fortunes-minilm.npy
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$R31" --starts 4096 --steps 500 --judge 0 --label warm-up > /dev/null 2>&1
timeout 200 $B/bench_gram --table "$T/seed.npy" --precisions fp32,fp16 --compensated 1,0 --judge 0,1 \
  --label "peer 8359x768 whole cache" 2>&1 | tee "$OUT/seed.log"
timeout 200 $B/bench_gram --table "$FORT" --center --precisions fp16 --judge 0,1 \
  --label "fortunes 14943 centred whole cache" 2>&1 | tee "$OUT/fortunes.log"
timeout 300 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 15551 --steps 3000 --wg 1024 \
  --placements registers --compensated 1,0 --judge 0,1 --label "real31k centred fp16, 15551 x 3000" \
  2>&1 | tee "$OUT/p31k_3000.log"
S=$(python3 -c "n=31102; print(','.join(str(i * (n - 1) // 15) for i in range(16)))")
for sums in "" "--plain-sums"; do
  timeout 120 $B/sequences --table "$R31" --mode gram --starts "$S" --judge $sums --center --precision fp16 \
    --out "$T/o.json" 2>&1 | tail -1 | tee -a "$OUT/oracle.log"
  timeout 300 python3 bench/seq_oracle.py "$R31" "$T/o.json" --center --precision fp16 --device cuda --batch 16 \
    2>&1 | tee -a "$OUT/oracle.log"
done
