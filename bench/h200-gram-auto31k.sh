#!/usr/bin/env bash
# The gram engine's default arithmetic past the register file (plain sums with the judge,
# rows loaded in groups of 8, every key recomputed each 4,096 steps) on real31k
# (bench/make-real31k.py): half the whole cache (15,551 sequences at full length) in bench_gram, and
# 16 spread full sequences through the `sequences` example with no arithmetic named (the
# engine's choice, printed) checked by the float64 oracle; the fortunes' default (compensated,
# unchanged) beside it. On the GPU machine from the repo root with .gl/ carried. Writes
# $OUT/auto31k.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
B=.gl/bin
T=$(mktemp -d)
L=$OUT/auto31k.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L"
R31=$T/real31k.npy
python3 bench/make-real31k.py .gl/data/fortunes-minilm.npy "$R31" | tee -a "$L"
timeout 60 $B/bench_gram --table "$R31" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
# The first half of the whole cache (the whole does not fit one batch next to G).
timeout 300 $B/bench_gram --table "$R31" --center --precisions fp16 --compensated 0 --judge 1 --starts 15551 \
  --label "real31k, first half of the whole cache, plain + judge (the default past 17,408)" 2>&1 | grep -v "^ *fp.. G:" | tee -a "$L"
for tab in "$R31:31102" ".gl/data/fortunes-minilm.npy:14943"; do
  f=${tab%%:*}; n=${tab##*:}
  S=$(python3 -c "n=$n; print(','.join(str(i * (n - 1) // 15) for i in range(16)))")
  echo "-- $f: 16 full sequences, default arithmetic" | tee -a "$L"
  timeout 120 $B/sequences --table "$f" --mode gram --starts "$S" --center --precision fp16 --out "$T/o.json" 2>&1 | tail -2 | tee -a "$L"
  python3 -c "import json; print('summation:', json.load(open('$T/o.json'))['metadata'].get('summation'))" | tee -a "$L"
  timeout 300 python3 bench/seq_oracle.py "$f" "$T/o.json" --center --precision fp16 --device cuda --batch 16 2>&1 | tee -a "$L"
done
