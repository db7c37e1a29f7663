#!/usr/bin/env bash
# The tensor-core scan's three rows with the default build of 41b4cc3 (.gl/bin/bench, gzipped:
# 96-dim stages, no register prefetch, the judge staging two rows), each beside the torch peer in
# one run: Block128 first (the same-bits reference), then three coopmat samples in the same
# process (the later two warm), fp16, untiled; then the peer (fp32, TF32, fp16 inputs) on the
# same table (`--parts seed`: its own error against float64 was measured in
# ../2026-12-02-h200-filter-geometry/). GPU machine, repo root, .gl/ carried. $OUT/peer.log,
# $OUT/peer_*.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/peer.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
run() {  # table dim starts steps chunk label
  echo "== $(date +%T) $6" | tee -a "$L"
  timeout 150 $B/bench --table "$1" --dim "$2" --starts "$3" --steps "$4" --chunk "$5" \
    --precisions fp16 --kernels block128,coopmat,coopmat,coopmat --shapes untiled --quick --label "$6" 2>&1 \
    | grep -E "^  (block128|coopmat)|differs|rror" | tee -a "$L"
}
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32" > /dev/null
run "$T/seed.f32" 768 3584 500 50 "seed 8359x768, 3584 x 500"
echo "== $(date +%T) peer seed" | tee -a "$L"
timeout 120 python3 bench/peer/torch_diversity.py --parts seed 2>&1 | tail -2 | tee "$OUT/peer_seed.log"
timeout 90 python3 bench/peer/torch_diversity.py --n 1048576 --d 384 --dump "$T/big.f32" > /dev/null
run "$T/big.f32" 384 1024 100 100 "N 1048576 x 384, 1024 x 100"
echo "== $(date +%T) peer N 1048576" | tee -a "$L"
timeout 150 python3 bench/peer/torch_diversity.py --data "$T/big.f32" --n 1048576 --d 384 --starts 1024 --steps 100 \
  --no-gram --parts seed 2>&1 | tail -2 | tee "$OUT/peer_large.log"
rm -f "$T/big.f32"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n.f32" > /dev/null
run "$T/n.f32" 768 3584 500 50 "N 65536x768, 3584 x 500"
echo "== $(date +%T) peer N 65536" | tee -a "$L"
timeout 120 python3 bench/peer/torch_diversity.py --n 65536 --parts seed 2>&1 | tail -2 | tee "$OUT/peer_n65536.log"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
