#!/usr/bin/env bash
# The gram judge (fresh keys on the shared-memory tree; a subgroup-shuffle version measured slower
# in bench/results/2026-11-30-h200-gram-judge3 and was taken out), the path without the judge
# against commit 7bce0f2 (.gl/bin/bench_gram_old), on the GPU machine from the repo root with
# .gl/ carried (prepare-gl's bench_gram and sequences, fortunes-minilm.npy, the loader .debs).
# Writes to $OUT (packed into gram-judge3.tgz):
#   ab.log       real31k (bench/make-real31k.py), 2,048 sequences × 3,000 steps, WG 1,024,
#                registers, no judge: old and new, compensated and plain, each twice (same bits)
#   judge31k.log real31k 2,048 full sequences: plain and compensated with the judge, and the
#                same plain run with subgroups off (shared-memory reductions: same bits, cmp)
#   small.log    peer 8,359 × 768 and fortunes whole caches, summations × judge
#   oracle.log   16 spread full sequences with the judge, float64 oracle on the GPU
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack gram-judge3
B=.gl/bin
T=$(mktemp -d)
FORT=.gl/data/fortunes-minilm.npy
R31=$T/real31k.npy
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 bench/make-real31k.py "$FORT" "$R31" | tee "$OUT/real31k.txt"
h200_seed_npy "$T"
timeout 60 $B/bench_gram --table "$R31" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
for b in bench_gram_old bench_gram; do
  for c in 1 0; do
    timeout 60 $B/$b --table "$R31" --center --precisions fp16 --starts 2048 --steps 3000 --wg 1024 \
      --placements registers,registers --compensated $c --judge 0 --label "$b compensated $c" 2>&1 \
      | grep -v "^ *fp16 G" | tee -a "$OUT/ab.log"
  done
done
J="--table $R31 --center --precisions fp16 --starts 2048 --wg 1024 --placements registers --judge 1"
timeout 150 $B/bench_gram $J --compensated 0 --refresh 0,4096 --loads 0,8 --seqs "$T/sg.u32" \
  --label "real31k 2048 x full, plain + judge" 2>&1 | tee "$OUT/judge31k.log"
DIVERSITY_DISABLE=subgroups timeout 150 $B/bench_gram $J --compensated 0 --refresh 0 --seqs "$T/shared.u32" \
  --label "real31k 2048 x full, plain + judge, subgroups off" 2>&1 | tee -a "$OUT/judge31k.log"
cmp "$T/sg.u32" "$T/shared.u32" && echo "subgroups on vs off: same bits" | tee -a "$OUT/judge31k.log" \
  || echo "subgroups on vs off: DIFFER" | tee -a "$OUT/judge31k.log"
timeout 100 $B/bench_gram $J --compensated 1 --refresh 4096 \
  --label "real31k 2048 x full, compensated + judge" 2>&1 | tee -a "$OUT/judge31k.log"
timeout 100 $B/bench_gram $J --compensated 1 --judge 0 \
  --label "real31k 2048 x full, compensated, no judge" 2>&1 | tee -a "$OUT/judge31k.log"
timeout 100 $B/bench_gram --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 0,1 \
  --label "peer 8359x768 whole cache" 2>&1 | tee "$OUT/small.log"
timeout 150 $B/bench_gram --table "$FORT" --center --precisions fp16 --compensated 1,0 --judge 0,1 \
  --label "fortunes 14943 centred whole cache" 2>&1 | tee -a "$OUT/small.log"
h200_oracle "$R31" 31102 "real31k centred fp16, plain sums + judge" --center --precision fp16 --judge --plain-sums
h200_oracle "$R31" 31102 "real31k centred fp16, judge" --center --precision fp16 --judge
h200_oracle "$FORT" 14943 "fortunes centred fp16, judge" --center --precision fp16 --judge
h200_oracle "$FORT" 14943 "fortunes centred fp32, judge" --center --precision fp32 --judge
h200_oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, judge" --precision fp32 --judge
