#!/usr/bin/env bash
# IVF search latency and the fortunes table, IVF-Flat and IVF-PQ beside faiss-cpu, in one run on
# the GPU machine, from the repo root with .gl/ carried: .gl/bin/bench_ivf (bench/prepare-gl.sh
# builds it), the fortunes table (.gl/data/fortunes-minilm.f32 or .npy), the Vulkan loader .debs
# and a faiss-cpu wheel in .gl/wheels/ (`pip download faiss-cpu==1.15.1 --no-deps -d .gl/wheels`;
# the GPU machine has no network; numpy must already be there).
#   fortunes  13,943 × 384 (the last 1,000 rows held out as queries), cosine, k = 10, nlist 118,
#             nprobe 1, 4, 16, 64 and all (bench_ivf adds nlist; so does the peer)
# For each of IVF-Flat and IVF-PQ (M = 32 × 8 bits, re-rank × 4; the peer's IndexIVFPQ and
# IndexRefineFlat, also as an L2 index of unit rows, see bench/ivf_peer.py --normalize):
# bench_ivf --latency 16 (wall time a search call for 1 and 16 queries at nprobe 16, median and
# p90 of --calls after warm-up, with the call's submissions and buffers, sets and pipelines
# made), then the table per nprobe (bench_ivf fails unless nprobe = nlist reproduces the exact
# search), then the peer on the same table, queries and ground truth with the same latency rows.
# `latency` lines of every log gathered in $OUT/latency.txt; outputs packed into
# $OUT/ivf-latency.tgz. About 5 minutes; fits one 600 s call.
#
# Every input can be overridden for a local run on lavapipe (LAVAPIPE=1 skips the GPU machine's
# setup), e.g. LAVAPIPE=1 OUT=/tmp/o B=target/release/examples/bench_ivf F=data/fortunes-2k.npy
# Q=tail:100 NLIST=32 M=16 CALLS=20 bash bench/h200-ivf-latency.sh
set -uo pipefail
if [ -z "${LAVAPIPE:-}" ]; then
  source "$(dirname "$0")/h200-env.sh"
  h200_pack ivf-latency
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  python3 -c "import faiss" 2>/dev/null || python3 -m pip install --no-index --no-deps --root-user-action=ignore .gl/wheels/faiss_cpu-*.whl 2>&1 | tail -1
else
  export DIVERSITY_DEVICE=${DIVERSITY_DEVICE:-llvmpipe}
  mkdir -p "$OUT"
fi
python3 -c "import faiss; print('faiss', faiss.__version__, faiss.omp_get_max_threads(), 'threads')" | tee "$OUT/faiss.txt"
B=${B:-.gl/bin/bench_ivf}
P=bench/ivf_peer.py
T=$(mktemp -d)
if [ -z "${F:-}" ]; then
  F=.gl/data/fortunes-minilm.f32
  [ -f "$F" ] || F=.gl/data/fortunes-minilm.npy
fi
DIM=${DIM:-384}
Q=${Q:-tail:1000}
NLIST=${NLIST:-118}
NP=${NP:-1,4,16,64}
M=${M:-32}
CALLS=${CALLS:-500}
LAT=${LAT:-16}
COMMON=(--k 10 --nlist "$NLIST" --nprobe "$NP" --latency "$LAT" --calls "$CALLS")
timeout 150 "$B" --table "$F" --dim "$DIM" --queries "$Q" --metric cosine "${COMMON[@]}" \
  --dump-queries "$T/fq.f32" --dump-table "$T/ft.f32" --dump-gt "$T/fgt.i32" \
  --json "$OUT/flat.json" --label "fortunes cosine IVF-Flat" 2>&1 | tee "$OUT/flat.log"
timeout 100 python3 $P --table "$T/ft.f32" --dim "$DIM" --queries "$T/fq.f32" --gt "$T/fgt.i32" \
  --metric cosine "${COMMON[@]}" --json "$OUT/flat_faiss.json" \
  --label "fortunes faiss-cpu IVFFlat cosine" 2>&1 | tee -a "$OUT/flat.log"
timeout 240 "$B" --table "$F" --dim "$DIM" --queries "$Q" --metric cosine "${COMMON[@]}" \
  --pq "$M" --refine 4 --json "$OUT/pq.json" --label "fortunes cosine IVF-PQ M=$M" 2>&1 | tee "$OUT/pq.log"
for pm in "cosine" "l2 --normalize"; do
  # shellcheck disable=SC2086
  timeout 100 python3 $P --table "$T/ft.f32" --dim "$DIM" --queries "$T/fq.f32" --gt "$T/fgt.i32" \
    --metric $pm "${COMMON[@]}" --pq "$M" --refine 4 --json "$OUT/pq_faiss_${pm%% *}.json" \
    --label "fortunes faiss-cpu IVFPQ $pm" 2>&1 | tee -a "$OUT/pq.log"
done
grep -h "^latency\|^fortunes\|: .* queries, k = " "$OUT/flat.log" "$OUT/pq.log" | tee "$OUT/latency.txt"
rm -rf "$T"
