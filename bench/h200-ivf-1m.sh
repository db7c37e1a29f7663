#!/usr/bin/env bash
# IVF-Flat and IVF-PQ at 1M scale beside faiss-cpu (16 cores) in one run on the GPU machine, from
# the repo root with .gl/ carried (.gl/bin/bench_ivf, the loader .debs, the faiss-cpu wheel in
# .gl/wheels/): 1,000,000 x 128 clustered rows, 10,000 queries (bench/ivf_peer.py
# --make-clustered), L2, k = 10, nlist 4,096, both sides trained on 64 points a centroid for 10
# iterations (the same for both; it keeps faiss's k-means at ~15 s instead of ~110 s), nprobe 1,
# 4, 16, 64; IVF-PQ M = 16 x 8 bits with the exact re-rank x 4 (faiss: IndexIVFPQ +
# IndexRefineFlat). Outputs in $OUT (ivf1m.log, JSON), packed into ivf1m.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack ivf1m
B=.gl/bin/bench_ivf
P=bench/ivf_peer.py
T=$(mktemp -d)
L=$OUT/ivf1m.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import faiss" 2>/dev/null || python3 -m pip install --no-index --no-deps --root-user-action=ignore .gl/wheels/faiss_cpu-*.whl 2>&1 | tail -1
timeout 60 python3 $P --make-clustered 1000000,128,10000,10000 --out-table "$T/c.f32" --out-queries "$T/q.f32"
C="--dim 128 --k 10 --metric l2 --nlist 4096 --nprobe 1,4,16,64 --train-max 64 --iters 10"
echo "== $(date +%T) ours IVF-Flat" | tee -a "$L"
timeout 120 $B --table "$T/c.f32" --queries "$T/q.f32" $C --dump-gt "$T/gt.i32" --json "$OUT/flat.json" \
  --label "clustered 1M x 128, 10k queries, IVF-Flat" 2>&1 | tee -a "$L"
echo "== $(date +%T) faiss IVF-Flat" | tee -a "$L"
timeout 150 python3 $P --table "$T/c.f32" --queries "$T/q.f32" --gt "$T/gt.i32" $C --json "$OUT/flat_faiss.json" \
  --label "clustered 1M faiss-cpu IVFFlat" 2>&1 | tee -a "$L"
echo "== $(date +%T) ours IVF-PQ" | tee -a "$L"
timeout 120 $B --table "$T/c.f32" --queries "$T/q.f32" $C --pq 16 --refine 4 --json "$OUT/pq.json" \
  --label "clustered 1M x 128, 10k queries, IVF-PQ M=16 re-rank x4" 2>&1 | tee -a "$L"
echo "== $(date +%T) faiss IVF-PQ" | tee -a "$L"
timeout 150 python3 $P --table "$T/c.f32" --queries "$T/q.f32" --gt "$T/gt.i32" $C --pq 16 --refine 4 \
  --json "$OUT/pq_faiss.json" --label "clustered 1M faiss-cpu IVFPQ + refine x4" 2>&1 | tee -a "$L"
echo "== $(date +%T) done" | tee -a "$L"
