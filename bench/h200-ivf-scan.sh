#!/usr/bin/env bash
# The IVF list scan's shape on the GPU machine (workgroup size × rows an invocation scans at a
# time, DIVERSITY_IVF_SCAN=wg,rows) and (with .gl/bin/bench_ivf_prof, a build of commit c185e4a
# whose phase timers DIVERSITY_IVF_TIMES printed; taken out since) where a search's wall time
# goes, on the fortunes and on the synthetic clustered 1M × 128 of
# bench/h200-ivf.sh. Needs .gl/bin/bench_ivf (and .gl/bin/bench_ivf_prof for the phases), the
# fortunes in .gl/data, numpy. Outputs packed into $OUT/ivf-scan.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack ivf-scan
B=.gl/bin/bench_ivf
T=$(mktemp -d)
F=.gl/data/fortunes-minilm.f32
[ -f "$F" ] || F=.gl/data/fortunes-minilm.npy
python3 -c "import faiss" 2>/dev/null || python3 -m pip install --no-index --no-deps --root-user-action=ignore .gl/wheels/faiss_cpu-*.whl 2>&1 | tail -1
timeout 60 python3 bench/ivf_peer.py --make-clustered 1000000,128,10000,10000 --out-table "$T/c1m.f32" --out-queries "$T/c1m_q.f32"
if [ -x .gl/bin/bench_ivf_prof ]; then
  [ "${ONLY_1M:-}" ] || DIVERSITY_IVF_TIMES=1 timeout 60 .gl/bin/bench_ivf_prof --table "$F" --dim 384 --queries tail:1000 --k 10 --metric cosine \
    --nlist 118 --nprobe 1,32 --iters 2 --no-full 2>&1 | tee "$OUT/phases-fortunes.log" | tail -30
  DIVERSITY_IVF_TIMES=1 timeout 90 .gl/bin/bench_ivf_prof --table "$T/c1m.f32" --dim 128 --queries "$T/c1m_q.f32" --k 10 \
    --metric l2 --nlist 4096 --nprobe 1,16 --iters 2 --no-full 2>&1 | tee "$OUT/phases-1m.log" | tail -30
fi
# k-means at full length once (the default shape), then the shapes on the searches.
timeout 120 $B --table "$T/c1m.f32" --dim 128 --queries "$T/c1m_q.f32" --k 10 --metric l2 --nlist 4096 \
  --nprobe 1,2,4,8,16,64 --label "clustered 1M default" 2>&1 | tee "$OUT/default-1m.log"
for shape in ${SHAPES:-32,1 64,1 256,1 64,2 128,2 32,4 64,4}; do
  DIVERSITY_IVF_SCAN=$shape timeout 90 $B --table "$T/c1m.f32" --dim 128 --queries "$T/c1m_q.f32" --k 10 --metric l2 \
    --nlist 4096 --nprobe 1,16,64 --iters 2 --no-full --label "clustered 1M shape $shape" 2>&1 | tee "$OUT/shape-$shape-1m.log" | grep -E "nprobe|shape"
  [ "${ONLY_1M:-}" ] || DIVERSITY_IVF_SCAN=$shape timeout 60 $B --table "$F" --dim 384 --queries tail:1000 --k 10 --metric cosine \
    --nlist 118 --nprobe 1,32 --iters 2 --no-full --label "fortunes shape $shape" 2>&1 | tee "$OUT/shape-$shape-fortunes.log" | grep -E "nprobe|shape"
done
