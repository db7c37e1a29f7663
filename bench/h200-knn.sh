#!/usr/bin/env bash
# The k-NN benchmark run (issue 6) on the GPU machine, from the repo root, with .gl/ carried
# (bench/prepare-gl.sh: .gl/bin/bench_knn, .gl/data/fortunes-minilm.f32, the Vulkan loader .debs).
# Side by side with the PyTorch peer (bench/peer/torch_knn.py: torch.topk over a matmul):
#   rankings   all-pairs rankings of the peer's 8,359 × 768 table, k = 100 and k = all (cosine)
#   random1m   10,000 queries against 1,000,000 × 128 uniform random vectors, k = 100, L2
#   fortunes   the fortunes k-NN graph, 14,943 × 384, k = 10, cosine
# bench_knn's variants: auto (the device's choice: on GPUs WarpSelect over the blocked product's
# key tiles where k allows), fused (WarpSelect computing its own keys, one row a lane), nowarp (the selection or
# full-ranking path); each checked bit for bit against the first. Outputs packed into
# $OUT/knn-results.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack knn-results
B=.gl/bin/bench_knn
P=bench/peer/torch_knn.py
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# SM clock and utilisation every 100 ms while the benchmarks run ($OUT/clocks.csv): the GPU's
# clock decays to 345 MHz within ~1.5 s of idling (the host work after a k = all download is
# longer) and a 20 ms burst afterwards runs at the low clock (measured 2026-11-29: 5× longer GPU
# times), so the log says which measurements ran at 1,980 MHz.
nvidia-smi --query-gpu=timestamp,clocks.sm,utilization.gpu --format=csv,noheader -lms 100 > "$OUT/clocks.csv" &
POLL=$!
trap 'kill $POLL 2>/dev/null; pack' EXIT
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
for k in 100 all; do
  timeout 120 $B --table "$T/seed.f32" --dim 768 --k $k --repeat 3 --precisions fp32,fp16 --variants $([ $k = all ] && echo auto || echo auto,fused,nowarp) --ids "$T/ours_$k.i32" \
    --label "rankings 8359x768 k=$k" --json "$OUT/rankings_$k.json" --md "$OUT/rankings_$k.md" 2>&1 | tee "$OUT/rankings_$k.log"
  timeout 120 python3 $P --table "$T/seed.f32" --dim 768 --k $k --out "$T/peer_$k.npy" 2>&1 | tee -a "$OUT/rankings_$k.log"
  timeout 60 python3 bench/compare_knn.py "$T/ours_$k.i32" "$T/peer_$k.npy" --self 2>&1 | tee -a "$OUT/rankings_$k.log"
done
timeout 120 python3 $P --random 1000000,10000,128 --dump-table "$T/r1m.f32" --dump-queries "$T/q10k.f32"
timeout 150 $B --table "$T/r1m.f32" --dim 128 --queries "$T/q10k.f32" --k 100 --metric l2 --repeat 3 --precisions fp32,fp16 \
  --ids "$T/ours_r1m.i32" --label "1M x 128, 10k queries, k=100, L2" --json "$OUT/random1m.json" \
  --md "$OUT/random1m.md" 2>&1 | tee "$OUT/random1m.log"
timeout 120 python3 $P --table "$T/r1m.f32" --dim 128 --queries "$T/q10k.f32" --k 100 --metric l2 \
  --out "$T/peer_r1m.npy" 2>&1 | tee -a "$OUT/random1m.log"
timeout 60 python3 bench/compare_knn.py "$T/ours_r1m.i32" "$T/peer_r1m.npy" 2>&1 | tee -a "$OUT/random1m.log"
timeout 120 $B --table .gl/data/fortunes-minilm.f32 --dim 384 --k 10 --repeat 3 --precisions fp32,fp16 --variants auto,fused,nowarp \
  --ids "$T/ours_f.i32" --label "fortunes k-NN graph, k=10" --json "$OUT/fortunes.json" \
  --md "$OUT/fortunes.md" 2>&1 | tee "$OUT/fortunes.log"
timeout 120 python3 $P --table .gl/data/fortunes-minilm.f32 --dim 384 --k 10 --out "$T/peer_f.npy" 2>&1 | tee -a "$OUT/fortunes.log"
timeout 60 python3 bench/compare_knn.py "$T/ours_f.i32" "$T/peer_f.npy" --self 2>&1 | tee -a "$OUT/fortunes.log"
