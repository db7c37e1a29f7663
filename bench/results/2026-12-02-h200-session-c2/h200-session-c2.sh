#!/usr/bin/env bash
# Session c, run 2 on the GPU machine (kept with its logs; repo root, .gl/ carried: .gl/bin/bench_ivf built at d0961d8 from
# this tree, the fortunes at .gl/data/fortunes-minilm.f32, the loader .debs, the faiss-cpu
# wheel): every row of the approximate-search targets, each beside faiss-cpu in the same run.
# PART=fortunes: bench/h200-ivf-latency.sh into $OUT/lat (the fortunes, IVF-Flat and IVF-PQ
#   M = 32 re-rank x 4, every nprobe, the latency rows; packed there as ivf-latency.tgz).
# PART=1m: 1,000,000 x 128 clustered, 10k queries, L2, nlist 4,096 (64 points a centroid, 10
#   iterations on both sides): IVF-Flat, then IVF-PQ M = 16 without and with the exact re-rank
#   x 4, each over nprobe 1, 4, 16, 64 twice (the first pass warms the clocks up; quote the
#   second), then faiss-cpu's IndexIVFFlat and IndexIVFPQ (+ RefineFlat) on the same table,
#   queries and ground truth; logs in $OUT/m1/.
set -uo pipefail
source bench/h200-env.sh  # from the repo root
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import faiss" 2>/dev/null || python3 -m pip install --no-index --no-deps --root-user-action=ignore .gl/wheels/faiss_cpu-*.whl 2>&1 | tail -1
case ${PART:-fortunes} in
fortunes)
  mkdir -p "$OUT/lat"
  OUT=$OUT/lat CALLS=${CALLS:-300} bash bench/h200-ivf-latency.sh > "$OUT/fortunes-run.log" 2>&1
  ;;
1m)
  B=.gl/bin/bench_ivf
  P=bench/ivf_peer.py
  T=$(mktemp -d)
  O=$OUT/m1
  mkdir -p "$O"
  timeout 40 python3 $P --make-clustered 1000000,128,10000,10000 --out-table "$T/c.f32" --out-queries "$T/q.f32"
  C="--dim 128 --k 10 --metric l2 --nlist 4096 --train-max 64 --iters 10"
  echo "== $(date +%T) ours IVF-Flat" | tee -a "$O/steps.log"
  timeout 90 $B --table "$T/c.f32" --queries "$T/q.f32" $C --nprobe 1,4,16,64,1,4,16,64 --no-full --dump-gt "$T/gt.i32" \
    --json "$O/flat.json" --label "clustered 1M x 128, 10k queries, IVF-Flat" 2>&1 | tee "$O/flat.log"
  echo "== $(date +%T) ours IVF-PQ" | tee -a "$O/steps.log"
  timeout 90 $B --table "$T/c.f32" --queries "$T/q.f32" $C --nprobe 1,4,16,64,1,4,16,64 --no-full --pq 16 --refine 4 \
    --json "$O/pq.json" --label "clustered 1M x 128, 10k queries, IVF-PQ M=16 re-rank x4" 2>&1 | tee "$O/pq.log"
  echo "== $(date +%T) faiss IVF-Flat" | tee -a "$O/steps.log"
  timeout 120 python3 $P --table "$T/c.f32" --queries "$T/q.f32" --gt "$T/gt.i32" $C --nprobe 1,4,16,64 --no-kmeans --no-full \
    --json "$O/flat_faiss.json" --label "clustered 1M faiss-cpu IVFFlat" 2>&1 | tee -a "$O/flat.log"
  echo "== $(date +%T) faiss IVF-PQ" | tee -a "$O/steps.log"
  timeout 120 python3 $P --table "$T/c.f32" --queries "$T/q.f32" --gt "$T/gt.i32" $C --nprobe 1,4,16,64 --pq 16 --refine 4 \
    --no-kmeans --no-full --json "$O/pq_faiss.json" --label "clustered 1M faiss-cpu IVFPQ + refine x4" 2>&1 | tee -a "$O/pq.log"
  echo "== $(date +%T) done" | tee -a "$O/steps.log"
  rm -rf "$T"
  ;;
esac
