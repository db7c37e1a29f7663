#!/usr/bin/env bash
# Not yet run. Is the fortunes' slower stream of G (2.7 TB/s against the 8,359 x 768 peer's 3.2,
# 3.98 with the settling compiled out) its occupancy — one workgroup an SM at 254 registers
# against the peer's two at 128 — or its data? The fortunes' first 8,359 rows (33 keys a lane at
# 256 invocations, as the peer) against the whole table, centred fp16, the driver's registers
# for both; settling compiled out too (timing only). If the subset streams like the peer, keys
# partly in shared memory (registers held to 128, two independent workgroups an SM) are worth
# building; if not, occupancy is not the fortunes' limit. .gl/bin/bench_gram of this tree.
# GPU machine, repo root, .gl/ carried. $OUT/occ-test.log, $OUT/stats.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/occ-test.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
h200_gram_tables "$T" >> "$L" 2>&1  # (not piped: it sets FORT and R31)
python3 -c "import numpy as np; np.save('$T/fort8359.npy', np.load('$FORT')[:8359])"
timeout 60 $B/bench_gram --table "$T/fortunes.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
for t in fort8359 fortunes; do
  DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram --table "$T/$t.npy" --center --precisions fp16 --starts 132 --steps 20 --label stats 2>&1 | grep gram_fixed | tee -a "$OUT/stats.log"
done
for i in 1 2; do
  timeout 100 $B/bench_gram --table "$T/fort8359.npy" --center --precisions fp16 --judge-variants c,nosettle --label "fortunes' first 8,359 rows" 2>&1 | tee -a "$L"
  timeout 100 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --judge-variants c,nosettle --label "peer" 2>&1 | tee -a "$L"
  timeout 100 $B/bench_gram --table "$T/fortunes.npy" --center --precisions fp16 --judge-variants c,nosettle --label "fortunes" 2>&1 | tee -a "$L"
done
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
