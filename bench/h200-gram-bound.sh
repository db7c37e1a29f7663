#!/usr/bin/env bash
# The default gram arithmetic's rigorous bound beside its measured excess (bench/seq_oracle.py
# --bound), 16 spread full sequences per table, on the GPU machine (repo root, .gl/ carried as
# for bench/h200-gram-judge.sh). Writes $OUT/bound.log (packed into gram-bound.tgz).
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack gram-bound
B=.gl/bin
T=$(mktemp -d)
h200_seed_npy "$T"
run() { # table n d label flags...
  local tab=$1 n=$2 d=$3 label=$4; shift 4
  local S; S=$(python3 -c "n=$n; print(','.join(str(i * (n - 1) // 15) for i in range(16)))")
  timeout 120 $B/sequences --table "$tab" --mode gram --starts "$S" "$@" --out "$T/o.json" 2>&1 | tail -1 | tee -a "$OUT/bound.log"
  local cf=""; for f in "$@"; do case $f in --center) cf="$cf --center";; fp16|fp32) cf="$cf --precision $f";; esac; done
  echo "-- $label" | tee -a "$OUT/bound.log"
  timeout 400 python3 bench/seq_oracle.py "$tab" "$T/o.json" $cf --device cuda --batch 16 --bound $d 2>&1 | tee -a "$OUT/bound.log"
}
run .gl/data/real31k.npy 31102 384 "real31k centred fp16" --center --precision fp16
run .gl/data/fortunes-minilm.npy 14943 384 "fortunes centred fp16" --center --precision fp16
run .gl/data/fortunes-minilm.npy 14943 384 "fortunes fp32, not centred" --precision fp32
run "$T/seed.npy" 8359 768 "peer 8359x768 fp32" --precision fp32
