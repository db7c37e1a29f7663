#!/usr/bin/env bash
# The gram judge settled from device memory with the keys reloaded after (GramOptions::
# judge_settle_mem, `mem`: the same bits as the default) beside the default (`c`) and the
# timing-only `nosettle` (no band code at all), on the GPU machine from the repo root with .gl/
# carried: real31k (bench/make-real31k.py) 2,048 full sequences and the first half of its whole
# cache, the fortunes and the peer whole caches (gram.log); the tensor-core filter's profile
# (scan.log): .gl/bin/bench (main), bench_dbuf (FILTER_DBUF 1: two stage buffers, one barrier a
# stage), and the timing-only bench_nostage / bench_nomma (FILTER_PROF 1 / 2: no operand copies /
# no fragment loads and products; wrong results) on the seed, N = 65,536 and N = 1,048,576 x 384;
# then, when PARTS has ivf, bench/h200-ivf-session.sh.
# Packed into session-b.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack session-b
B=.gl/bin
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
step() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.log"; }
PARTS=${PARTS:-scan gram ivf}
for part in $PARTS; do
  case $part in
  gram)
    step gram
    python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
    python3 bench/make-real31k.py "$T/fortunes.npy" "$T/r31.npy" | tee -a "$OUT/gram.log"
    h200_seed_npy "$T"
    timeout 60 $B/bench_gram --table "$T/r31.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
    DIVERSITY_PIPELINE_STATS=1 timeout 200 $B/bench_gram --table "$T/r31.npy" --center --precisions fp16 --starts 2048 --compensated 0 --judge 1 \
      --judge-variants c,mem,lazy,mem+lazy,nosettle,lean --label "real31k 2048 full, plain + judge" 2>&1 | tee -a "$OUT/gram.log"
    timeout 150 $B/bench_gram --table "$T/fortunes.npy" --center --precisions fp16 --compensated 1,0 --judge 1 \
      --judge-variants c,mem,lazy,mem+lazy --label "fortunes 14,943 centred fp16 whole cache" 2>&1 | tee -a "$OUT/gram.log"
    timeout 100 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 1 \
      --judge-variants c,mem,lazy,mem+lazy --label "peer 8,359 x 768 fp32 whole cache" 2>&1 | tee -a "$OUT/gram.log" ;;
  scan)
    step seed
    timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
    timeout 60 $B/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 200 --chunk 50 --precisions fp16 \
      --kernels coopmat --shapes untiled --quick --label warm-up > /dev/null 2>&1
    for b in bench bench_dbuf bench_nostage bench_nomma; do
      k=coopmat; case $b in bench|bench_dbuf) k=block128,coopmat;; esac
      DIVERSITY_PIPELINE_STATS=1 timeout 100 $B/$b --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
        --kernels $k --shapes untiled --quick --label "$b seed 8359x768, 3584 x 500" \
        2>&1 | grep -v "pipeline statistics (scan_\(big\|init\|ftable\|prep\)" | tee -a "$OUT/scan.log"
    done
    step n65536
    timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32" > /dev/null
    for b in bench bench_dbuf bench_nostage bench_nomma; do
      k=coopmat; case $b in bench|bench_dbuf) k=block128,coopmat;; esac
      timeout 100 $B/$b --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 --precisions fp16 \
        --kernels $k --shapes untiled --quick --label "$b N 65536x768, 3584 x 500" 2>&1 | tee -a "$OUT/scan.log"
    done
    rm -f "$T/n65536.f32"
    step large
    timeout 120 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
    for b in bench bench_dbuf; do
      k=coopmat; case $b in bench|bench_dbuf) k=block128,coopmat;; esac
      timeout 100 $B/$b --table "$T/big.f32" --dim 384 --precisions fp16 --starts 1024 --steps 100 --chunk 100 \
        --kernels $k --shapes untiled --quick --label "$b N 1048576 x 384 fp16, 1024 x 100" 2>&1 | tee -a "$OUT/scan.log"
    done
    rm -f "$T/big.f32" ;;
  ivf)
    step ivf
    [ -f bench/h200-ivf-session.sh ] && bash bench/h200-ivf-session.sh ;;
  esac
done
step done
