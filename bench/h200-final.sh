#!/usr/bin/env bash
# Two rows re-measured on the GPU machine (repo root, .gl/ carried: .gl/bin/bench and bench_ivf
# built from main, the loader .debs, the faiss-cpu wheel), outputs in $OUT:
#   large.log / peer_large.log  the tensor-core scan on N = 1,048,576 x 384 (the torch peer's
#       clustered generator), fp16, 1,024 x 100, Block128 and Coopmat (same-bits column), without
#       --probe (its per-phase timestamps cost ~0.2 s on this table), then the torch peer in fp32,
#       TF32 and fp16 inputs and its float64 check, in one run
#   ivf.log  IVF-PQ M = 16, re-rank x 4 on 1,000,000 x 128 clustered, 10k queries, nlist 4,096,
#       every nprobe twice (the first pass warms the GPU's clocks up), beside faiss-cpu
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
step() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.log"; }
step large
timeout 120 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
timeout 100 .gl/bin/bench --table "$T/big.f32" --dim 384 --precisions fp16 --starts 1024 --steps 100 --chunk 100 \
  --kernels block128,coopmat,coopmat --shapes untiled --quick --label "N 1048576 x 384 fp16, 1024 x 100" 2>&1 | tee "$OUT/large.log"
step peer
timeout 150 python3 bench/peer/torch_diversity.py --data "$T/big.f32" --n 1048576 --d 384 --starts 1024 --steps 100 \
  --no-gram --ref-steps 100 --parts seed,ref 2>&1 | tee "$OUT/peer_large.log"
rm -f "$T/big.f32"
step ivf
python3 -c "import faiss" 2>/dev/null || python3 -m pip install --no-index --no-deps --root-user-action=ignore .gl/wheels/faiss_cpu-*.whl 2>&1 | tail -1
P=bench/ivf_peer.py
timeout 40 python3 $P --make-clustered 1000000,128,10000,10000 --out-table "$T/c.f32" --out-queries "$T/q.f32"
C="--dim 128 --k 10 --metric l2 --nlist 4096 --train-max 64 --iters 10"
timeout 60 .gl/bin/bench_ivf --table "$T/c.f32" --queries "$T/q.f32" $C --nprobe 1,4,16,64,1,4,16,64 --no-full --pq 16 --refine 4 \
  --dump-gt "$T/gt.i32" --json "$OUT/pq1m.json" --label "clustered 1M x 128, 10k queries, IVF-PQ M=16 re-rank x4" 2>&1 | tee "$OUT/ivf.log"
step faiss
timeout 60 python3 $P --table "$T/c.f32" --queries "$T/q.f32" --gt "$T/gt.i32" $C --nprobe 1,4,16,64 --pq 16 --refine 4 \
  --no-kmeans --no-full --json "$OUT/pq1m_faiss.json" --label "clustered 1M faiss-cpu IVFPQ + refine x4" 2>&1 | tee -a "$OUT/ivf.log"
step done
