#!/usr/bin/env bash
# DEVS (default 0,0) picks the devices of the multi-device runs: DEVS=0,1 on a two-GPU machine.
# Issue 7 on the one-GPU machine: k-NN on two logical devices (the H200 opened twice) as shards
# (row slices) and as replicas (query blocks), against one device in the same process
# (examples/bench_knn --devices 0,0; every result checked bit for bit against the one-device
# run). From the repo root with .gl/ carried (bench/prepare-gl.sh). Outputs in
# $OUT/knn-multi-results.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack knn-multi-results
B=.gl/bin/bench_knn
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
timeout 120 python3 bench/peer/torch_knn.py --random 1000000,10000,128 --dump-table "$T/r1m.f32" --dump-queries "$T/q10k.f32"
for rep in 1 2; do
  timeout 200 $B --table "$T/r1m.f32" --dim 128 --queries "$T/q10k.f32" --k 100 --metric l2 \
    --precisions fp32 --variants auto --devices "${DEVS:-0,0}" --label "1M x 128, 10k queries, k=100, L2, rep $rep" \
    --md "$OUT/random1m_$rep.md" 2>&1 | tee -a "$OUT/knn-multi.log"
  timeout 120 $B --table "$T/seed.f32" --dim 768 --k 100 --precisions fp32 --variants auto \
    --devices "${DEVS:-0,0}" --label "rankings 8359x768 k=100, rep $rep" --md "$OUT/rankings_$rep.md" 2>&1 | tee -a "$OUT/knn-multi.log"
done
