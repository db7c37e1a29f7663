#!/usr/bin/env bash
# Where a gram step's time goes, by the subgroup clock (not yet run): .gl/bin/bench_gram_prof is
# bench_gram built with `DIVERSITY_SHADER_DEFINES=GF_PROFILE cargo build --release --example
# bench_gram` (then copied and stripped); DIVERSITY_SHADER_CLOCK=1 enables VK_KHR_shader_clock.
# Each line then ends with invocation 0's ticks a step in the update, the pick, the settling (and
# a settle's), and the step's end. The three tables with the default plan, the peer,
# fortunes and real31k with settling compiled out (timing only), the fortunes with 16 loads; the
# fortunes' register statistics; real31k's whole-cache first half with the default build. GPU machine, repo root, .gl/ carried.
# $OUT/profile.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/profile.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
export DIVERSITY_SHADER_CLOCK=1
timeout 60 $B/bench_gram_prof --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { timeout 120 $B/bench_gram_prof "$@" 2>&1 | tee -a "$L"; }
g --table "$T/seed.npy" --precisions fp32 --label "peer whole"
g --table "$T/seed.npy" --precisions fp32 --judge-variants nosettle --label "peer whole, settling compiled out"
g --table "$FORT" --center --precisions fp16 --label "fortunes whole"
g --table "$R31" --center --precisions fp16 --starts 2048 --label "real31k 2048 full"
g --table "$FORT" --center --precisions fp16 --judge-variants nosettle --label "fortunes whole, settling compiled out"
g --table "$FORT" --center --precisions fp16 --loads 16 --wg 256,512 --label "fortunes whole, 16 loads"
g --table "$R31" --center --precisions fp16 --starts 2048 --judge-variants nosettle --label "real31k 2048 full, settling compiled out"
unset DIVERSITY_SHADER_CLOCK
# Registers and local memory of the fortunes' pipelines (loads 8 and 16, 256 and 512 invocations).
DIVERSITY_PIPELINE_STATS=1 timeout 60 $B/bench_gram --table "$FORT" --center --precisions fp16 --starts 132 --steps 50 --wg 256,512 --loads 8,16 --label stats 2>&1 | tee -a "$OUT/stats.log"
# real31k's whole cache, first half, with the default (16 loads at 512 invocations): the default build.
timeout 200 $B/bench_gram --table "$R31" --center --precisions fp16 --starts 15551 \
  --label "real31k first half of the whole cache (15,551 full sequences), default" 2>&1 | tee -a "$L"
nvidia-smi --query-gpu=clocks.sm --format=csv,noheader | tee -a "$OUT/gpu.txt"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
