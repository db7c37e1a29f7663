#!/usr/bin/env bash
# The default gram arithmetic (no judge) on real31k (bench/make-real31k.py) at full length: the
# float64 oracle on 16 spread sequences, plain sums on 2,048 full sequences twice (same bits run
# to run), and the judge with loads in groups of 8 and a refresh every 4,096 steps twice. On the
# GPU machine from the repo root with .gl/ carried. Writes $OUT/default31k.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
B=.gl/bin
T=$(mktemp -d)
R31=$T/real31k.npy
L=$OUT/default31k.log
python3 bench/make-real31k.py .gl/data/fortunes-minilm.npy "$R31" | tee "$L"
S=$(python3 -c "n=31102; print(','.join(str(i * (n - 1) // 15) for i in range(16)))")
for flags in "" "--plain-sums"; do
  echo "-- real31k centred fp16, no judge $flags" | tee -a "$L"
  timeout 60 $B/sequences --table "$R31" --mode gram --starts "$S" --center --precision fp16 $flags --out "$T/o.json" 2>&1 | tail -1 | tee -a "$L"
  timeout 200 python3 bench/seq_oracle.py "$R31" "$T/o.json" --center --precision fp16 --device cuda --batch 16 2>&1 | tee -a "$L"
done
J="--table $R31 --center --precisions fp16 --starts 2048 --wg 1024 --placements registers,registers"
timeout 60 $B/bench_gram $J --compensated 0 --judge 0 --label "plain, no judge, twice" 2>&1 | tee -a "$L"
timeout 60 $B/bench_gram $J --compensated 0 --judge 1 --loads 8 --refresh 4096 --label "plain + judge, loads 8, refresh 4096, twice" 2>&1 | tee -a "$L"
