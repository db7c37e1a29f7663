#!/usr/bin/env bash
# Run 4: row loads a group on a896ab8 (.gl/bin/bench_gram, the committed tree): real31k's 2,048
# full sequences at 16 (the default at 512 invocations) and 32 values, the fortunes centred
# (4,096 full) at 8 (the default at 256), 12 and 20, each in its own process, alternating three
# times. GPU machine, repo root, .gl/ carried. $OUT/loads.log.
set -uo pipefail
source bench/h200-env.sh
for z in .gl/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done; chmod +x .gl/bin/*
B=.gl/bin
T=$(mktemp -d)
L=$OUT/loads.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
python3 bench/make-real31k.py "$T/fortunes.npy" "$T/real31k.npy"
timeout 60 $B/bench_gram --table "$T/fortunes.npy" --starts 2048 --steps 400 --label warm-up > /dev/null 2>&1
g() { local tag=$1; shift; timeout 60 $B/bench_gram "$@" 2>&1 | grep -E "GPU .* s " | sed -E "s/^.*(loads +[0-9]+).*(GPU +[0-9.]+ s).*(G rows +[0-9.]+ TB\/s).*/$tag \1 \2 \3/" | tee -a "$L"; }
for i in 1 2 3; do
  for l in 16 32; do g "real31k-2048 $i" --table "$T/real31k.npy" --center --precisions fp16 --starts 2048 --loads $l; done
  for l in 8 12 20; do g "fortunes-4096 $i" --table "$T/fortunes.npy" --center --precisions fp16 --starts 4096 --loads $l; done
done
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
