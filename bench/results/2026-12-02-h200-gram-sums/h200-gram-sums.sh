#!/usr/bin/env bash
# Kept with its log (binaries of 1f0928e; gram unchanged since). Which key sums go with the judge, by table (GPU time of whole caches, the judge on, compensated
# then plain sums, each the same job otherwise), on the GPU machine from the repo root with .gl/
# carried (.gl/bin/bench_gram, the fortunes). Tables: the PyTorch peer's 8,359 x 768 (fp32) as
# given and centred; the fortunes 14,943 x 384 (fp16) centred and as given (unit rows); the first
# 4,000 and 8,000 fortunes centred. $OUT/sums.log.
set -uo pipefail
source bench/h200-env.sh  # from the repo root
B=.gl/bin
T=$(mktemp -d)
L=$OUT/sums.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
h200_seed_npy "$T"
F=.gl/data/fortunes-minilm.f32
python3 -c "
import numpy as np
f = np.fromfile('$F', dtype='<f4').reshape(-1, 384)
np.save('$T/f.npy', f)
np.save('$T/f4k.npy', f[:4000])
np.save('$T/f8k.npy', f[:8000])
"
timeout 60 $B/bench_gram --table "$T/f.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
g() { timeout 120 $B/bench_gram "$@" --compensated 1,0 --judge 1 2>&1 | grep -v "^ *fp.. G:" | tee -a "$L"; }
g --table "$T/seed.npy" --precisions fp32 --label "peer 8359x768 as given, whole cache"
g --table "$T/seed.npy" --precisions fp32 --center --label "peer 8359x768 centred, whole cache"
g --table "$T/f.npy" --precisions fp16 --center --label "fortunes 14943x384 centred, whole cache"
g --table "$T/f.npy" --precisions fp16 --label "fortunes 14943x384 as given, whole cache"
g --table "$T/f4k.npy" --precisions fp16 --center --label "fortunes[:4000] centred, whole cache"
g --table "$T/f8k.npy" --precisions fp16 --center --label "fortunes[:8000] centred, whole cache"
echo "== $(date +%T) done" | tee -a "$L"
