#!/usr/bin/env bash
# The judge's gate (a step settled by 2A/|c| ≤ gate, no gap test) and the judge's refresh
# period, on the GPU machine from the repo root with .gl/ carried (bench_gram and sequences of
# this commit, fortunes-minilm.npy, the loader .debs). Writes to $OUT (packed into gram-gate.tgz):
#   small.log    peer 8,359 × 768 fp32 and fortunes centred fp16 whole caches: no judge, the
#                judge with the gate off and on, loads and refresh periods
#   r31.log      real31k (bench/make-real31k.py) 2,048 full sequences: plain sums without the
#                judge, with it (loads, refresh periods; one configuration twice: same bits run
#                to run), compensated sums with it
#   oracle.log   16 spread full sequences with the judge (default gate), float64 oracle on the GPU
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack gram-gate
B=.gl/bin
T=$(mktemp -d)
FORT=.gl/data/fortunes-minilm.npy
R31=$T/real31k.npy
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 bench/make-real31k.py "$FORT" "$R31" | tee "$OUT/real31k.txt"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
python3 -c "import numpy as np; np.save('$T/seed.npy', np.fromfile('$T/seed.f32', dtype='<f4').reshape(-1, 768))"
timeout 60 $B/bench_gram --table "$R31" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
run() { # log label args...
  local log=$1 label=$2; shift 2
  timeout 200 $B/bench_gram "$@" --label "$label" 2>&1 | grep -v "^ *fp.. G:" | tee -a "$OUT/$log"
}
run small.log "peer whole cache, no judge" --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 0
run small.log "peer whole cache, judge, gate" --table "$T/seed.npy" --precisions fp32 --compensated 1,0 --judge 1 --gate 2.5e-6,0
run small.log "fortunes centred whole cache, no judge" --table "$FORT" --center --precisions fp16 --compensated 1,0 --judge 0
run small.log "fortunes centred whole cache, judge" --table "$FORT" --center --precisions fp16 --compensated 1,0 --judge 1 --loads 8 --refresh 0,2048
J="--table $R31 --center --precisions fp16 --starts 2048 --wg 1024 --placements registers"
run r31.log "real31k 2048 full, plain, no judge" $J --compensated 0 --judge 0
run r31.log "real31k 2048 full, plain + judge, twice" $J,registers --compensated 0 --judge 1 --loads 8 --refresh 2048
run r31.log "real31k 2048 full, plain + judge" $J --compensated 0 --judge 1 --loads 0,8 --refresh 0,4096
run r31.log "real31k 2048 full, compensated + judge" $J --compensated 1 --judge 1 --loads 8 --refresh 2048
oracle() { # table n label flags...
  local tab=$1 n=$2 label=$3; shift 3
  local S; S=$(python3 -c "n=$n; print(','.join(str(i * (n - 1) // 15) for i in range(16)))")
  echo "-- $label: $*" | tee -a "$OUT/oracle.log"
  timeout 120 $B/sequences --table "$tab" --mode gram --starts "$S" "$@" --out "$T/o.json" 2>&1 | tail -1 | tee -a "$OUT/oracle.log"
  local cf=""; for f in "$@"; do case $f in --center) cf="$cf --center";; fp16|fp32) cf="$cf --precision $f";; esac; done
  timeout 300 python3 bench/seq_oracle.py "$tab" "$T/o.json" $cf --device cuda --batch 16 2>&1 | tee -a "$OUT/oracle.log"
}
oracle "$T/seed.npy" 8359 "peer 8359x768 fp32, judge (gate)" --precision fp32 --judge
oracle "$FORT" 14943 "fortunes centred fp16, judge (gate)" --center --precision fp16 --judge
oracle "$FORT" 14943 "fortunes centred fp32, judge (gate)" --center --precision fp32 --judge
oracle "$R31" 31102 "real31k centred fp16, plain sums + judge (gate)" --center --precision fp16 --judge --plain-sums
oracle "$R31" 31102 "real31k centred fp16, judge (gate)" --center --precision fp16 --judge
