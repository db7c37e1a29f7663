#!/usr/bin/env bash
# The tensor-core filter's 128 x 128 blocks and the gram judge's variants, one run on the GPU
# machine from the repo root with .gl/ carried (.gl/bin/bench and bench_gram built from this
# tree, .gl/bin/bench_old from the commit before the filter change, the fortunes, the loader
# .debs). PARTS picks a subset. Outputs in $OUT (packed into roof.tgz):
#   filter.log  seed 8,359 x 768 (3,584 x 500, untiled; old binary's coopmat beside the new
#               Block128 and coopmat, same-bits column against Block128), N = 65,536 x 768 and
#               N = 1,048,576 x 384 fp16 (1,024 x 100), each with --probe (per-phase times)
#   gram.log    real31k (bench/make-real31k.py) 2,048 full sequences, plain sums, WG 1,024: no
#               judge, and the judge eager / lazy / kmaxc; the fortunes and the peer table whole
#               caches with and without the judge
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack roof
B=.gl/bin
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
PARTS=${PARTS:-seed gram n65536 large ivf}
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
python3 -c "import numpy as np; np.save('$T/seed.npy', np.fromfile('$T/seed.f32', dtype='<f4').reshape(-1, 768))"
for part in $PARTS; do
  echo "== $(date +%T) $part" | tee -a "$OUT/steps.log"
  case $part in
  seed)
    for b in bench_old bench bench_np bench_w; do
      DIVERSITY_PIPELINE_STATS=1 timeout 100 $B/$b --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
        --kernels block128,coopmat --precisions fp16 --shapes untiled --quick --probe --label "$b seed 8359x768, 3584 x 500" \
        2>&1 | grep -v "pipeline statistics (scan_\(big\|init\|ftable\|prep\)" | tee -a "$OUT/filter.log"
    done ;;
  n65536)
    timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32" > /dev/null
    for b in bench bench_np bench_w; do
      timeout 200 $B/$b --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 --precisions fp16 \
        --kernels coopmat --shapes untiled --quick --probe --label "$b N 65536x768, 3584 x 500" \
        2>&1 | tee -a "$OUT/filter.log"
    done ;;
  large)
    timeout 120 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
    for b in bench bench_np bench_w; do
      timeout 100 $B/$b --table "$T/big.f32" --dim 384 --precisions fp16 --starts 1024 --steps 100 --chunk 100 \
        --kernels coopmat --shapes untiled --quick --probe --label "$b N 1048576 x 384 fp16, 1024 x 100" 2>&1 | tee -a "$OUT/filter.log"
    done ;;
  gram)
    python3 bench/make-real31k.py "$FORT" "$T/real31k.npy" | tee -a "$OUT/gram.log"
    timeout 60 $B/bench_gram --table "$T/real31k.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
    J="--table $T/real31k.npy --center --precisions fp16 --starts 2048 --wg 512 --placements registers --compensated 0 --loads 8"
    DIVERSITY_PIPELINE_STATS=1 timeout 150 $B/bench_gram $J --judge 1 --refresh 4096 --judge-variants eager,lazy,kmaxc,lazy+kmaxc,noevents \
      --label "real31k 2048 full, plain + judge" 2>&1 | grep -v "statistics (gram_matrix" | tee -a "$OUT/gram.log"
    timeout 150 $B/bench_gram --table "$FORT" --center --precisions fp16 --compensated 1,0 --judge 1 \
      --judge-variants eager,lazy --label "fortunes 14943 centred whole cache, judge" 2>&1 | tee -a "$OUT/gram.log"
    timeout 100 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1 --judge 1 \
      --judge-variants eager,lazy --label "peer 8359x768 whole cache, judge" 2>&1 | tee -a "$OUT/gram.log" ;;
  ivf)
    mkdir -p "$OUT/ivf"; OUT=$OUT/ivf timeout 400 bash bench/h200-ivf-latency.sh > "$OUT/ivf.log" 2>&1 ;;
  esac
done
echo "== $(date +%T) done" | tee -a "$OUT/steps.log"
