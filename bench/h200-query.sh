#!/usr/bin/env bash
# Sequences on demand and caches that grow on the GPU machine (one command, bench/results/):
# the real31k table (bench/make-real31k.py from .gl/data) through bench_query and bench_grow,
# carried in .gl/bin, on the GPU (gram and scan) and on the host engine of the machine's cores.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin T=$(mktemp -d)
python3 bench/make-real31k.py .gl/data/fortunes-minilm.f32 "$T/r31.npy"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
# Warm the GPU (the clock drops when idle), then each row.
timeout 120 $B/bench_query --table "$T/r31.npy" --k 100 --queries 20 --label warm-up >/dev/null
timeout 120 $B/bench_query --table "$T/r31.npy" --k 100 --label "GPU, auto"
timeout 120 $B/bench_query --table "$T/r31.npy" --k 100 --mode scan --label "GPU, scan"
timeout 120 $B/bench_query --table "$T/r31.npy" --k 100 --device host --label "host engine"
timeout 200 $B/bench_grow --table "$T/r31.npy" --top-k 100 --label "GPU, 1% appended"
timeout 200 $B/bench_grow --table "$T/r31.npy" --top-k 100 --device host --label "host engine, 1% appended"
nvidia-smi --query-gpu=clocks.sm --format=csv,noheader
