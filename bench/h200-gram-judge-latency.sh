#!/usr/bin/env bash
# (Ran once; c9d72fc is reverted.) The judge's exposed latencies: .gl/bin/bench_gram (commit fb0806b: |e_prev| read after the
# pick, the picked row added to c at the step's end), bench_gram_a (|e_prev| read at the step's
# start) and bench_gram_b (also the row loaded at the start, added after the Gram row's loads),
# on real31k 2,048 full sequences (plain + judge, the default there), the fortunes whole cache
# and the peer whole cache (compensated + judge). On the GPU machine from the repo root with
# .gl/ carried. Writes $OUT/latency.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
B=.gl/bin
T=$(mktemp -d)
L=$OUT/latency.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L"
python3 bench/make-real31k.py .gl/data/fortunes-minilm.npy "$T/r31.npy" >/dev/null
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$T/r31.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
for b in bench_gram bench_gram_a bench_gram_b; do
  echo "== $b" | tee -a "$L"
  timeout 100 $B/$b --table "$T/r31.npy" --center --precisions fp16 --starts 2048 --wg 1024 --placements registers \
    --compensated 0 --judge 1 --label "real31k 2048 full" 2>&1 | grep -v "^ *fp.. G:" | tee -a "$L"
  timeout 100 $B/$b --table .gl/data/fortunes-minilm.npy --center --precisions fp16 --compensated 1 --judge 1 \
    --label "fortunes whole" 2>&1 | grep -v "^ *fp.. G:" | tee -a "$L"
  timeout 100 $B/$b --table "$T/seed.npy" --precisions fp32 --compensated 1 --judge 1 \
    --label "peer whole" 2>&1 | grep -v "^ *fp.. G:" | tee -a "$L"
done
