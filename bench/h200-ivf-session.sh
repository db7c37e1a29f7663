#!/usr/bin/env bash
# IVF-PQ on the GPU machine beside faiss-cpu (16 cores), one run from the repo root with .gl/
# carried (.gl/bin/bench_ivf built from this tree, the fortunes at .gl/data/fortunes-minilm.f32,
# the loader .debs, the faiss-cpu wheel in .gl/wheels/). About 2 minutes of device time (the
# timeouts add up to 4 minutes; the 1 M rows were ~26 s ours and ~76 s faiss's in
# h200-ivf-1m.sh, which also ran faiss's k-means alone and the nprobe = nlist rows):
#  1. training time on the fortunes (13,943 x 384 indexed, 1,000 held-out queries, cosine,
#     nlist 118, M = 32 x 8 bits, 20 iterations): ours twice (the coarse k-means and the M
#     sub-quantizers' k-means in lockstep, two submissions an iteration each; each run also
#     times a k-means of the coarse shape alone, to split the training), faiss once
#     (IndexIVFPQ + RefineFlat train; its k-means run alone skipped);
#  2. 1,000,000 x 128 clustered rows, 10,000 queries, L2, k = 10, nlist 4,096, M = 16 with the
#     exact re-rank x 4, both sides trained on 64 points a centroid for 10 iterations (as
#     h200-ivf-1m.sh; faiss's k-means run alone and the nprobe = nlist rows skipped): nprobe 1,
#     4, 16, 64, then 4 and 1 again — if the second nprobe 1 and 4 rows are as slow as the first,
#     the slowness is the shape of the work, not a cold GPU — each row with its coarse GPU time.
# Outputs in $OUT (session.log, JSON), packed into session.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack session
B=.gl/bin/bench_ivf
P=bench/ivf_peer.py
T=$(mktemp -d)
L=$OUT/session.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import faiss" 2>/dev/null || python3 -m pip install --no-index --no-deps --root-user-action=ignore .gl/wheels/faiss_cpu-*.whl 2>&1 | tail -1
F=.gl/data/fortunes-minilm.f32
for i in 1 2; do
  echo "== $(date +%T) ours fortunes IVF-PQ M=32, run $i" | tee -a "$L"
  timeout 30 $B --table "$F" --dim 384 --queries tail:1000 --k 10 --metric cosine --nlist 118 \
    --nprobe 16 --no-full --pq 32 --refine 4 --dump-queries "$T/fq.f32" --dump-table "$T/ft.f32" \
    --dump-gt "$T/fgt.i32" --json "$OUT/fortunes_pq_$i.json" --label "fortunes IVF-PQ M=32, run $i" 2>&1 | tee -a "$L"
done
echo "== $(date +%T) faiss fortunes IVF-PQ" | tee -a "$L"
timeout 30 python3 $P --table "$T/ft.f32" --dim 384 --queries "$T/fq.f32" --gt "$T/fgt.i32" --k 10 \
  --nlist 118 --nprobe 16 --metric cosine --pq 32 --refine 4 --no-kmeans --no-full \
  --json "$OUT/fortunes_pq_faiss.json" --label "fortunes faiss-cpu IVFPQ cosine" 2>&1 | tee -a "$L"
echo "== $(date +%T) 1M clustered" | tee -a "$L"
timeout 40 python3 $P --make-clustered 1000000,128,10000,10000 --out-table "$T/c.f32" --out-queries "$T/q.f32"
C="--dim 128 --k 10 --metric l2 --nlist 4096 --train-max 64 --iters 10"
echo "== $(date +%T) ours 1M IVF-PQ" | tee -a "$L"
timeout 50 $B --table "$T/c.f32" --queries "$T/q.f32" $C --nprobe 1,4,16,64,4,1 --no-full --pq 16 --refine 4 \
  --dump-gt "$T/gt.i32" --json "$OUT/pq1m.json" --label "clustered 1M x 128, 10k queries, IVF-PQ M=16 re-rank x4" 2>&1 | tee -a "$L"
echo "== $(date +%T) faiss 1M IVF-PQ" | tee -a "$L"
timeout 60 python3 $P --table "$T/c.f32" --queries "$T/q.f32" --gt "$T/gt.i32" $C --nprobe 1,4,16,64 --pq 16 --refine 4 \
  --no-kmeans --no-full --json "$OUT/pq1m_faiss.json" --label "clustered 1M faiss-cpu IVFPQ + refine x4" 2>&1 | tee -a "$L"
echo "== $(date +%T) done" | tee -a "$L"
