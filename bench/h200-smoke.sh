#!/usr/bin/env bash
# Run on the GPU machine from the repo root, with the release `sequences` and `check` binaries in
# .gl/bin and Debian's libvulkan1 + libglvnd .debs in .gl (see BENCHMARKS.md): the whole cache of
# the bundled 2,048 fortunes in every shape × fp32/fp16, a same-bits comparison across shapes, and
# a sample of sequences written to $OUT for the float64 oracle (`examples/check`) to check here.
set -euo pipefail
source "$(dirname "$0")/h200-env.sh"
B=.gl/bin
for p in fp32 fp16; do
  for sh in "untiled" "tiled --tile 4096" "per-tile --tile 1024"; do
    n=${sh%% *}
    # shellcheck disable=SC2086
    $B/sequences --table data/fortunes-2k.npy --precision $p --shape $sh --chunk 256 --pipelined \
      --out "$OUT/full_${p}_$n.json"
  done
done
$B/sequences --table data/fortunes-2k.npy --precision fp16 --shape untiled --center \
  --starts 0,100,200,300,400,500,600,700 --out "$OUT/center16.json"
cd "$OUT"
python3 - <<'PY'
import json
for p in ['fp32', 'fp16']:
    a = [json.load(open(f'full_{p}_{n}.json')) for n in ['untiled', 'tiled', 'per-tile']]
    s = [x['sequences'] for x in a]
    print(p, 'same bits across shapes:', s[0] == s[1] == s[2], len(s[0]), 'sequences')
    json.dump({'metadata': a[0]['metadata'], 'sequences': {k: s[0][k] for k in list(s[0])[::128]}},
              open(f'sample_{p}.json', 'w'))
PY
rm -f full_*.json
