#!/usr/bin/env bash
# Kept with its log (run from the repo root as bench/<name>.sh with .gl/ carried).
# The fixed-point gram kernel's registers, spills and shared memory from the driver
# (DIVERSITY_PIPELINE_STATS=1), and short timings of its workgroup sizes and row loads in flight
# beside plain float sums without the judge: real31k 512 sequences x 4,000 steps, the peer's
# table 2,048 x 4,000. GPU machine, repo root, .gl/ carried. $OUT/stats.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/stats.log
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
python3 bench/make-real31k.py "$T/fortunes.npy" "$T/r31.npy" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$T/fortunes.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
export DIVERSITY_PIPELINE_STATS=1
timeout 120 $B/bench_gram --table "$T/r31.npy" --center --precisions fp16 --starts 1024 --steps 4000 \
  --wg 512,1024 --loads 8,16,32 --label "real31k 1024 x 4000 fixed" 2>&1 | tee -a "$L"
timeout 120 $B/bench_gram --table "$T/r31.npy" --center --precisions fp16 --starts 1024 --steps 4000 \
  --compensated 0 --judge 0 --wg 512,1024 --label "real31k 1024 x 4000 plain, no judge" 2>&1 | tee -a "$L"
timeout 120 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --starts 2048 --steps 4000 \
  --wg 256,512 --loads 8,33 --label "peer 2048 x 4000 fixed" 2>&1 | tee -a "$L"
echo "== $(date +%T) done" | tee -a "$L"
