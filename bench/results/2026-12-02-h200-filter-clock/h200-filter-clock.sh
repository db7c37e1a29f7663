#!/usr/bin/env bash
# Where the tensor-core filter's time goes, by the subgroup clock, on the GPU machine (repo root,
# .gl/ carried): the split of what the profile by subtraction
# (bench/results/2026-12-02-h200-filter-prof/) left outside one GEMM pass. .gl/bin/bench_fclock is
# the bench example built with the filter's clock profile:
#   DIVERSITY_SHADER_DEFINES=FILTER_CLOCK cargo build --release --example bench
# then stripped and copied to .gl/bin/bench_fclock. Run with DIVERSITY_SHADER_CLOCK=1 (the device's
# VK_KHR_shader_clock), each coopmat line is followed by
#   clock (subgroup ticks a block, invocation 0): setup N, staging N, products N, epilogue N,
#   fallback N over B blocks
# (shaders/filter_block.glsl, "THE CLOCK PROFILE": invocation 0 of each workgroup reads the
# subgroup clock at the block's phase boundaries; a read is no fence, so a load's latency lands in
# the phase that first uses it; the sums cover the timed run only, not the probe or the --probe
# phase re-runs that follow the line). The profile build gives the same bits: Block128 runs beside
# it on every table (its same-bits column), and main's .gl/bin/bench, where present, runs the
# same coopmat rows for the profiling's overhead. GF_PROFILE-style diagnostic; untested on a GPU
# until this runs: "same bits: NO", "differs from the reference" or "miss block 0's best" in
# clock.log means the build is wrong. Tables: the seed (8,359 x 768, 3,584 x 500),
# N = 65,536 x 768 (3,584 x 500), N = 1,048,576 x 384 (1,024 x 100); fp16, untiled, --quick,
# --probe. Writes $OUT/clock.log.
set -uo pipefail
source bench/h200-env.sh  # from the repo root
B=.gl/bin
T=$(mktemp -d)
L=$OUT/clock.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -x $B/bench_fclock ] || { echo "missing $B/bench_fclock" | tee -a "$L"; exit 1; }
export DIVERSITY_SHADER_CLOCK=1
run() {  # table dim starts steps chunk label
  local tab=$1 dim=$2 st=$3 sp=$4 ch=$5 lab=$6
  echo "== $(date +%T) bench_fclock $lab (block128,coopmat)" | tee -a "$L"
  timeout 120 $B/bench_fclock --table "$tab" --dim "$dim" --starts "$st" --steps "$sp" --chunk "$ch" \
    --precisions fp16 --kernels block128,coopmat --shapes untiled --quick --probe \
    --label "bench_fclock $lab" 2>&1 | tee -a "$L"
  if [ -x $B/bench ]; then
    echo "== $(date +%T) bench $lab (coopmat, no profile)" | tee -a "$L"
    timeout 90 $B/bench --table "$tab" --dim "$dim" --starts "$st" --steps "$sp" --chunk "$ch" \
      --precisions fp16 --kernels coopmat --shapes untiled --quick --probe \
      --label "bench $lab" 2>&1 | tee -a "$L"
  fi
}
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
# Warm-up, the profile build first (a pipeline that fails to build, e.g. without
# VK_KHR_shader_clock, shows at once), with the pipelines' statistics (registers, spills) of both
# builds: what the clock reads cost in registers.
for v in bench_fclock bench; do
  [ -x $B/$v ] || continue
  echo "== $(date +%T) warm-up $v" | tee -a "$L"
  DIVERSITY_PIPELINE_STATS=1 timeout 30 $B/$v --table "$T/seed.f32" --dim 768 --starts 3584 --steps 200 \
    --chunk 50 --precisions fp16 --kernels coopmat --shapes untiled --quick --label "warm-up $v" 2>&1 | tee -a "$L"
done
run "$T/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n.f32" > /dev/null
run "$T/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
rm -f "$T/n.f32"
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
run "$T/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
