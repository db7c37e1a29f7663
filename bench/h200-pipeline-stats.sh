#!/usr/bin/env bash
# The driver's statistics of the gram pipelines (DIVERSITY_PIPELINE_STATS=1: registers, spills,
# shared memory as NVIDIA's driver reports them) with and without the judge, for the three
# workloads of the gram benchmarks (peer 8,359 × 768 at WG 256, fortunes at WG 512, real31k at
# WG 1,024), each with a short timed run. On the GPU machine from the repo root with .gl/
# carried. Writes $OUT/stats.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
B=.gl/bin
T=$(mktemp -d)
L=$OUT/stats.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L"
python3 bench/make-real31k.py .gl/data/fortunes-minilm.npy "$T/r31.npy" >/dev/null
h200_seed_npy "$T"
export DIVERSITY_PIPELINE_STATS=1
for args in "--table $T/seed.npy --precisions fp32 --starts 2048 --steps 2000" \
            "--table .gl/data/fortunes-minilm.npy --center --precisions fp16 --starts 2048 --steps 2000" \
            "--table $T/r31.npy --center --precisions fp16 --starts 1024 --steps 2000 --wg 1024 --placements registers"; do
  echo "-- $args" | tee -a "$L"
  timeout 120 $B/bench_gram $args --compensated 1,0 --judge 0,1 --label stats 2>&1 | grep -v "^ *fp.. G:" | tee -a "$L"
done
