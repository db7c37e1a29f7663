#!/usr/bin/env bash
# Session c, run 1 on the GPU machine (repo root, .gl/ carried; binaries of 1f0928e; bench_glob and
# bench_glob4 built from it with the defines below changed), kept with its logs:
#   ivf.log     IVF-PQ M = 16, re-rank x 4, 1 M x 128 clustered, 10k queries, nlist 4,096, every
#               nprobe twice (first pass warms clocks), beside faiss-cpu (the block select's
#               merge on subgroups, first time on the GPU)
#   filter.log  the tensor-core filter three ways, each beside Block128 (same-bits column): main's
#               staged operands (.gl/bin/bench), fragments from device memory (bench_glob:
#               FILTER_GLOBAL 1), and that with 128 x 128 blocks (bench_glob4: FILTER_GLOBAL 1,
#               FILTER_TI 4, COOPMAT_BLOCK_M 128); seed 3,584 x 500, N = 65,536 x 768, 1 M x 384
set -uo pipefail
source bench/h200-env.sh  # from the repo root
B=.gl/bin
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
step() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.log"; }
step ivf
python3 -c "import faiss" 2>/dev/null || python3 -m pip install --no-index --no-deps --root-user-action=ignore .gl/wheels/faiss_cpu-*.whl 2>&1 | tail -1
P=bench/ivf_peer.py
timeout 40 python3 $P --make-clustered 1000000,128,10000,10000 --out-table "$T/c.f32" --out-queries "$T/q.f32"
C="--dim 128 --k 10 --metric l2 --nlist 4096 --train-max 64 --iters 10"
timeout 60 $B/bench_ivf --table "$T/c.f32" --queries "$T/q.f32" $C --nprobe 1,4,16,64,1,4,16,64 --no-full --pq 16 --refine 4 \
  --dump-gt "$T/gt.i32" --json "$OUT/pq1m.json" --label "clustered 1M x 128, 10k queries, IVF-PQ M=16 re-rank x4" 2>&1 | tee "$OUT/ivf.log"
step faiss
timeout 60 python3 $P --table "$T/c.f32" --queries "$T/q.f32" --gt "$T/gt.i32" $C --nprobe 1,4,16,64 --pq 16 --refine 4 \
  --no-kmeans --no-full --json "$OUT/pq1m_faiss.json" --label "clustered 1M faiss-cpu IVFPQ + refine x4" 2>&1 | tee -a "$OUT/ivf.log"
rm -f "$T"/*.f32 "$T"/*.i32
L=$OUT/filter.log
step seed
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
timeout 30 $B/bench --table "$T/seed.f32" --dim 768 --starts 3584 --steps 200 --chunk 50 --precisions fp16 \
  --kernels coopmat --shapes untiled --quick --label warm-up > /dev/null 2>&1
for v in bench bench_glob bench_glob4; do
  timeout 40 $B/$v --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
    --kernels block128,coopmat,coopmat --shapes untiled --quick --label "$v seed 8359x768, 3584 x 500" 2>&1 | tee -a "$L"
done
step n65536
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32" > /dev/null
for v in bench bench_glob bench_glob4; do
  timeout 50 $B/$v --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 --precisions fp16 \
    --kernels block128,coopmat --shapes untiled --quick --label "$v N 65536x768, 3584 x 500" 2>&1 | tee -a "$L"
done
rm -f "$T/n65536.f32"
step big
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
for v in bench bench_glob bench_glob4; do
  timeout 50 $B/$v --table "$T/big.f32" --dim 384 --precisions fp16 --starts 1024 --steps 100 --chunk 100 \
    --kernels block128,coopmat --shapes untiled --quick --label "$v N 1048576 x 384 fp16, 1024 x 100" 2>&1 | tee -a "$L"
done
step done
