#!/usr/bin/env bash
# The last gram run of the session: (1) a fresh key's row values loaded 8 at a time before its
# chain's products (.gl/bin/bench_gram, this tree) against one at a time (.gl/bin/bench_gram_old,
# 54f5841), alternating, on the peer's whole cache (2.67 M settles) and real31k (2,048 full),
# every sequence compared; (2) loads in flight 8 (the default) against 16 and the fortunes at 512
# invocations, now that the hot loop does not spill. GPU machine, repo root, .gl/ carried.
# $OUT/loads.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/loads.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
FORT=$T/fortunes.npy
R31=$T/real31k.npy
python3 bench/make-real31k.py "$FORT" "$R31" | tee -a "$L"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$FORT" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { local v=$1; shift; timeout 120 $B/$v "$@" 2>&1 | tee -a "$L"; }
i=0
for v in bench_gram_old bench_gram bench_gram_old bench_gram; do
  i=$((i + 1))
  g $v --table "$T/seed.npy" --precisions fp32 --label "$v peer whole" --seqs "$T/$v-$i-peer.u32"
done
for v in bench_gram_old bench_gram; do
  g $v --table "$R31" --center --precisions fp16 --starts 2048 --label "$v real31k 2048 full" --seqs "$T/$v-r31.u32"
done
cmp "$T/bench_gram_old-1-peer.u32" "$T/bench_gram-2-peer.u32" && cmp "$T/bench_gram-2-peer.u32" "$T/bench_gram-4-peer.u32" \
  && echo "same bits old/new: peer" | tee -a "$L" || echo "DIFFERENT bits: peer" | tee -a "$L"
cmp "$T/bench_gram_old-r31.u32" "$T/bench_gram-r31.u32" && echo "same bits old/new: r31" | tee -a "$L" || echo "DIFFERENT bits: r31" | tee -a "$L"
g bench_gram --table "$R31" --center --precisions fp16 --starts 2048 --loads 16 --label "new real31k 2048 full, 16 loads"
g bench_gram --table "$FORT" --center --precisions fp16 --loads 8,16 --label "new fortunes whole, loads"
g bench_gram --table "$FORT" --center --precisions fp16 --wg 512 --label "new fortunes whole, 512"
g bench_gram --table "$T/seed.npy" --precisions fp32 --loads 16 --label "new peer whole, 16 loads"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
