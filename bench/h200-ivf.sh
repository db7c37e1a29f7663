#!/usr/bin/env bash
# k-means and IVF-Flat on the GPU machine, side by side with faiss-cpu on its 16 cores, from the
# repo root with .gl/ carried: .gl/bin/bench_ivf (bench/prepare-gl.sh builds it), the fortunes
# table (.gl/data/fortunes-minilm.f32 or .npy), the Vulkan loader .debs and a faiss-cpu wheel in
# .gl/wheels/ (`pip download faiss-cpu==1.15.1 --no-deps -d .gl/wheels`; the GPU machine has no
# network; numpy must already be there). Workloads:
#   fortunes    13,943 × 384 (the last 1,000 rows held out as queries), cosine, k = 10, nlist 118
#   clustered   1,000,000 × 128 synthetic clustered (bench/ivf_peer.py --make-clustered, 10,000
#               centres) with 10,000 queries, L2, k = 10, nlist 4,096
# Each: bench_ivf (exact ground truth, k-means, add, search per nprobe; it fails unless nprobe =
# nlist reproduces the exact search), then the peer on the same table, queries and ground truth.
# IVF-PQ (bench_ivf --pq M --refine 4, the peer's IndexIVFPQ and IndexRefineFlat; the peer also
# as an L2 index of unit rows for fortunes, see bench/ivf_peer.py --normalize):
#   pq-fortunes   as fortunes, M = 32 (12 dims a sub-space), k_factor 4
#   pq-clustered  as clustered, M = 16 (8 dims a sub-space), k_factor 4
# `bash bench/h200-ivf.sh fortunes` (or clustered, pq-fortunes, pq-clustered) runs one workload
# (each fits one 600 s call; several together may not), no argument fortunes and clustered.
# Outputs packed into $OUT/ivf-results.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack ivf-results
B=.gl/bin/bench_ivf
P=bench/ivf_peer.py
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import faiss" 2>/dev/null || python3 -m pip install --no-index --no-deps --root-user-action=ignore .gl/wheels/faiss_cpu-*.whl 2>&1 | tail -1
python3 -c "import faiss; print('faiss', faiss.__version__, faiss.omp_get_max_threads(), 'threads')" | tee "$OUT/faiss.txt"
WHICH=${1:-all}
F=.gl/data/fortunes-minilm.f32
[ -f "$F" ] || F=.gl/data/fortunes-minilm.npy
if [ "$WHICH" = pq-fortunes ]; then
timeout 240 $B --table "$F" --dim 384 --queries tail:1000 --k 10 --metric cosine --nlist 118 \
  --nprobe 1,4,8,16,32 --pq 32 --refine 4 --dump-queries "$T/fq.f32" --dump-table "$T/ft.f32" \
  --dump-gt "$T/fgt.i32" --json "$OUT/pq_fortunes.json" \
  --label "fortunes 13943x384 cosine IVF-PQ M=32" 2>&1 | tee "$OUT/pq_fortunes.log"
for pm in "cosine" "l2 --normalize"; do
timeout 120 python3 $P --table "$T/ft.f32" --dim 384 --queries "$T/fq.f32" --gt "$T/fgt.i32" --k 10 \
  --nlist 118 --nprobe 1,4,8,16,32 --metric $pm --pq 32 --refine 4 \
  --json "$OUT/pq_fortunes_faiss_${pm%% *}.json" --label "fortunes faiss-cpu IVFPQ $pm" 2>&1 | tee -a "$OUT/pq_fortunes.log"
done
exit 0
fi
if [ "$WHICH" = pq-clustered ]; then
timeout 60 python3 $P --make-clustered 1000000,128,10000,10000 --out-table "$T/c1m.f32" --out-queries "$T/c1m_q.f32"
timeout 250 $B --table "$T/c1m.f32" --dim 128 --queries "$T/c1m_q.f32" --k 10 --metric l2 --nlist 4096 \
  --nprobe 1,4,16,64 --pq 16 --refine 4 --dump-gt "$T/c1m_gt.i32" --json "$OUT/pq_clustered1m.json" \
  --label "clustered 1M x 128, 10k queries, L2, IVF-PQ M=16" 2>&1 | tee "$OUT/pq_clustered1m.log"
timeout 300 python3 $P --table "$T/c1m.f32" --dim 128 --queries "$T/c1m_q.f32" --gt "$T/c1m_gt.i32" --k 10 \
  --nlist 4096 --nprobe 1,4,16,64 --metric l2 --pq 16 --refine 4 --json "$OUT/pq_clustered1m_faiss.json" \
  --label "clustered 1M faiss-cpu IVFPQ" 2>&1 | tee -a "$OUT/pq_clustered1m.log"
exit 0
fi
F=.gl/data/fortunes-minilm.f32
[ -f "$F" ] || F=.gl/data/fortunes-minilm.npy
if [ "$WHICH" = all ] || [ "$WHICH" = fortunes ]; then
timeout 180 $B --table "$F" --dim 384 --queries tail:1000 --k 10 --metric cosine --nlist 118 \
  --nprobe 1,4,8,16,32 --dump-queries "$T/fq.f32" --dump-table "$T/ft.f32" --dump-gt "$T/fgt.i32" \
  --json "$OUT/fortunes.json" --label "fortunes 13943x384 cosine, 1000 held-out queries" 2>&1 | tee "$OUT/fortunes.log"
timeout 120 python3 $P --table "$T/ft.f32" --dim 384 --queries "$T/fq.f32" --gt "$T/fgt.i32" --k 10 \
  --nlist 118 --nprobe 1,4,8,16,32 --metric cosine --json "$OUT/fortunes_faiss.json" \
  --label "fortunes faiss-cpu" 2>&1 | tee -a "$OUT/fortunes.log"
fi
[ "$WHICH" = all ] || [ "$WHICH" = clustered ] || exit 0
timeout 60 python3 $P --make-clustered 1000000,128,10000,10000 --out-table "$T/c1m.f32" --out-queries "$T/c1m_q.f32"
timeout 250 $B --table "$T/c1m.f32" --dim 128 --queries "$T/c1m_q.f32" --k 10 --metric l2 --nlist 4096 \
  --nprobe 1,2,4,8,16,64 --dump-gt "$T/c1m_gt.i32" --json "$OUT/clustered1m.json" \
  --label "clustered 1M x 128, 10k queries, L2" 2>&1 | tee "$OUT/clustered1m.log"
timeout 280 python3 $P --table "$T/c1m.f32" --dim 128 --queries "$T/c1m_q.f32" --gt "$T/c1m_gt.i32" --k 10 \
  --nlist 4096 --nprobe 1,2,4,8,16,64 --metric l2 --json "$OUT/clustered1m_faiss.json" \
  --label "clustered 1M faiss-cpu" 2>&1 | tee -a "$OUT/clustered1m.log"
