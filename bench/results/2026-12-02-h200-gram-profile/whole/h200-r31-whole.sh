#!/usr/bin/env bash
# real31k's whole cache (all 31,102 full sequences) as a user runs it: the `sequences` example
# (.gl/bin/sequences of 9ea8f96), gram mode, centred, fp16, batches as the engine plans them;
# its summary line has the GPU time. GPU machine, repo root, .gl/ carried. $OUT/r31.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/r31.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$L"
python3 -c "import numpy as np; np.save('$T/fortunes.npy', np.fromfile('.gl/data/fortunes-minilm.f32', dtype='<f4').reshape(-1, 384))"
python3 bench/make-real31k.py "$T/fortunes.npy" "$T/real31k.npy" | tee -a "$L"
timeout 60 $B/bench_gram --table "$T/fortunes.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
/usr/bin/time -v timeout 300 $B/sequences --table "$T/real31k.npy" --mode gram --center --precision fp16 \
  --out "$T/r31.json" 2>&1 | grep -E "GPU|Maximum resident|Elapsed" | tee -a "$L"
ls -la "$T/r31.json" | tee -a "$L"
rm -rf "$T"
echo "== $(date +%T) done" | tee -a "$L"
