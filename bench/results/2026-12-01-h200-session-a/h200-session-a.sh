#!/usr/bin/env bash
# One run on the GPU machine (repo root, .gl/ carried) for the two GPU-engine issues together:
#   gram.log  the judge's per-step cost, decomposed: real31k (bench/make-real31k.py) 2,048 full
#             sequences, plain sums + judge, variants c (the default), mem (uncertain steps
#             settled from device memory: the same bits), and the timing-only nosettle / notop2 /
#             nocsum / lean / noevents (not exact); no judge for reference; the fortunes and the
#             peer whole caches with c and mem
#   scan.log  the tensor-core filter with its epilogue on the accumulators: .gl/bin/bench (the
#             layout checked on the device, the default), bench_force (FILTER_REG_EPI 2: the
#             check skipped) and bench_st (FILTER_REG_EPI 0: products staged through shared
#             memory, as before), Block128 beside them (same-bits column): the seed (fp16 and
#             fp32), N = 65,536 x 768 and N = 1,048,576 x 384 (1,024 x 100)
# Packed into session-a.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack session-a
B=.gl/bin
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
PARTS=${PARTS:-scan gram large}
step() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.log"; }
for part in $PARTS; do
  case $part in
  scan)
    step seed
    timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
    timeout 60 $B/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 200 --chunk 50 --precisions fp16 \
      --kernels coopmat --shapes untiled --quick --label warm-up > /dev/null 2>&1
    for b in bench bench_force bench_st; do
      DIVERSITY_PIPELINE_STATS=1 timeout 100 $B/$b --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
        --kernels block128,coopmat --shapes untiled --quick --probe --label "$b seed 8359x768, 3584 x 500" \
        2>&1 | grep -v "pipeline statistics (scan_\(big\|init\|ftable\|prep\)" | tee -a "$OUT/scan.log"
    done
    step n65536
    timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32" > /dev/null
    timeout 100 $B/bench --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 --precisions fp16 \
      --kernels block128,coopmat --shapes untiled --quick --probe --label "bench N 65536x768, 3584 x 500" 2>&1 | tee -a "$OUT/scan.log"
    timeout 100 $B/bench_st --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 --precisions fp16 \
      --kernels coopmat --shapes untiled --quick --probe --label "bench_st N 65536x768, 3584 x 500" 2>&1 | tee -a "$OUT/scan.log"
    rm -f "$T/n65536.f32" ;;
  gram)
    step gram
    python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
    python3 bench/make-real31k.py "$T/fortunes.npy" "$T/r31.npy" | tee -a "$OUT/gram.log"
    h200_seed_npy "$T"
    timeout 60 $B/bench_gram --table "$T/r31.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
    timeout 200 $B/bench_gram --table "$T/r31.npy" --center --precisions fp16 --starts 2048 --compensated 0 --judge 1 \
      --judge-variants c,mem,nosettle,notop2,nocsum,lean,noevents --label "real31k 2048 full, plain + judge variants" 2>&1 | tee -a "$OUT/gram.log"
    timeout 60 $B/bench_gram --table "$T/r31.npy" --center --precisions fp16 --starts 2048 --compensated 0 --judge 0 --wg 1024 \
      --label "real31k 2048 full, plain, no judge (1,024 invocations)" 2>&1 | tee -a "$OUT/gram.log"
    timeout 150 $B/bench_gram --table "$T/fortunes.npy" --center --precisions fp16 --compensated 1,0 --judge 1 \
      --judge-variants c,mem --label "fortunes 14,943 centred fp16 whole cache" 2>&1 | tee -a "$OUT/gram.log"
    timeout 100 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1 --judge 1 \
      --judge-variants c,mem,lean --label "peer 8,359 x 768 fp32 whole cache" 2>&1 | tee -a "$OUT/gram.log" ;;
  large)
    step large
    timeout 120 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
    timeout 100 $B/bench --table "$T/big.f32" --dim 384 --precisions fp16 --starts 1024 --steps 100 --chunk 100 \
      --kernels block128,coopmat --shapes untiled --quick --probe --label "bench N 1048576 x 384 fp16, 1024 x 100" 2>&1 | tee -a "$OUT/scan.log"
    timeout 100 $B/bench_st --table "$T/big.f32" --dim 384 --precisions fp16 --starts 1024 --steps 100 --chunk 100 \
      --kernels coopmat --shapes untiled --quick --probe --label "bench_st N 1048576 x 384 fp16, 1024 x 100" 2>&1 | tee -a "$OUT/scan.log" ;;
  esac
done
step done
