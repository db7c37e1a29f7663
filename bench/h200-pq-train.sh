#!/usr/bin/env bash
# IVF-PQ training time beside faiss-cpu (16 cores) on the fortunes, one run on the GPU machine
# from the repo root with .gl/ carried (.gl/bin/bench_ivf, the fortunes, the loader .debs, the
# faiss-cpu wheel): 13,943 x 384 indexed, 1,000 held-out queries, cosine, nlist 118, M = 32 x 8
# bits, re-rank x 4, nprobe 16 (the search rows are in bench/h200-ivf-latency.sh). Writes
# $OUT/pq-train.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
T=$(mktemp -d)
L=$OUT/pq-train.log
python3 -c "import faiss" 2>/dev/null || python3 -m pip install --no-index --no-deps --root-user-action=ignore .gl/wheels/faiss_cpu-*.whl 2>&1 | tail -1
F=.gl/data/fortunes-minilm.f32
for i in 1 2; do
  timeout 60 .gl/bin/bench_ivf --table "$F" --dim 384 --queries tail:1000 --k 10 --metric cosine --nlist 118 \
    --nprobe 16 --pq 32 --refine 4 --dump-queries "$T/q.f32" --dump-table "$T/t.f32" --dump-gt "$T/gt.i32" \
    --label "fortunes IVF-PQ M=32, run $i" 2>&1 | tee -a "$L"
done
timeout 60 python3 bench/ivf_peer.py --table "$T/t.f32" --dim 384 --queries "$T/q.f32" --gt "$T/gt.i32" --k 10 \
  --nlist 118 --nprobe 16 --metric cosine --pq 32 --refine 4 --label "fortunes faiss-cpu IVFPQ cosine" 2>&1 | tee -a "$L"
