#!/usr/bin/env bash
# Kept with its log. The filter epilogue with each lane's candidate finv read once a stage (.gl/bin/bench_fv) against
# main (.gl/bin/bench_ballot, f152699), each twice, Block128 beside bench_fv (same bits); seed,
# N = 65,536 x 768, N = 1,048,576 x 384; fp16, untiled. Repo root, .gl/ carried. $OUT/fv.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/fv.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
run() {
  local tab=$1 dim=$2 st=$3 sp=$4 ch=$5 lab=$6
  for v in bench_ballot bench_fv bench_ballot bench_fv; do
    local k=coopmat
    [ $v = bench_fv ] && k=block128,coopmat
    timeout 60 $B/$v --table "$tab" --dim "$dim" --starts "$st" --steps "$sp" --chunk "$ch" --precisions fp16 \
      --kernels "$k" --shapes untiled --quick --label "$v $lab" 2>&1 | tee -a "$L"
  done
}
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
timeout 30 $B/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 200 --chunk 50 --precisions fp16 \
  --kernels coopmat --shapes untiled --quick --label warm-up > /dev/null 2>&1
run "$T/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n.f32" > /dev/null
run "$T/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
rm -f "$T/n.f32"
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
run "$T/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
echo "== $(date +%T) done" | tee -a "$L"
