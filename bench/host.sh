#!/usr/bin/env bash
# The host engine beside what a CPU-only user has otherwise, in one run on this machine: the
# numpy gram peer (bench/peer/numpy_gram.py, float32 keys, all sequences at once), the host
# engine (examples/bench_host: G + every step, no output; and the command line end to end,
# JSON written) and the gram shaders on lavapipe (the command line with --device llvmpipe), for
# the whole cache of the first N fortunes, centred; then the 8,359 x 768 stand-in of the
# PyTorch peer's seed table (its generator with numpy's RNG: torch is not installable here) on
# the host engine alone, with numpy's and lavapipe's times estimated from their rates at N =
# 2,000. Prints one line a run; the log goes to $OUT (default bench/results/<date>-host).
# usage: bash bench/host.sh            (NS="1000 2000" SEED=1 to change)
set -euo pipefail
cd "$(dirname "$0")/.."
NS=${NS:-1000 2000}
SEED=${SEED:-1}
OUT=${OUT:-bench/results/$(date -u +%Y-%m-%d)-host}
mkdir -p "$OUT"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 -c 'import numpy' 2>/dev/null || pip install -q numpy
cargo build --release --quiet --example bench_host
bash scripts/build-lua.sh
L="$OUT/host.log"
{
  echo "date: $(date -u +%FT%TZ)  commit: $(git rev-parse --short HEAD)  machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
  echo "lavapipe: $(LUA_CPATH='target/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit -e 'local c = require("diversity").open{device="llvmpipe"}; local k = c:caps(); print(k.device_name .. ", " .. k.driver)')"
} | tee "$L"
cli() { LUA_CPATH='target/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;' luajit lua/diversity/cli.lua "$@"; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >"$T/run.out" 2>"$T/run.err" || { cat "$T/run.err" >&2; return 1; }; t1=$(date +%s.%N); python3 -c "print(f'{$t1 - $t0:.2f}')"; }
for n in $NS; do
  python3 -c "import numpy as np; np.save('$T/f$n.npy', np.load('data/fortunes-2k.npy')[:$n])"
  # numpy: unset the OpenBLAS settings this machine carries (they slow a current numpy).
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/peer/numpy_gram.py "$T/f$n.npy" --center --out "$T/np$n.u32" | tee -a "$L"
  target/release/examples/bench_host "$T/f$n.npy" --center --out "$T/host$n.u32" | tee -a "$L"
  python3 -c "
import numpy as np
a = np.fromfile('$T/np$n.u32', dtype=np.uint32).reshape($n, $n); b = np.fromfile('$T/host$n.u32', dtype=np.uint32).reshape($n, $n)
same = (a == b).all(axis=1).sum(); pre = [(r1 != r2).argmax() if (r1 != r2).any() else $n for r1, r2 in zip(a, b)]
print(f'N={$n}: host vs numpy sequences identical {same} of {$n}; common prefix median {int(np.median(pre))}')" | tee -a "$L"
  cp "$T/f$n.npy" "$T/h$n.npy"; cp "$T/f$n.npy" "$T/l$n.npy"
  s=$(secs cli --embeddings "$T/h$n.npy" --out "$T/h$n.json" --center --quiet)
  echo "N=$n command line, host engine (default here), whole cache + JSON: $s s wall; $(cat "$T/run.out")" | tee -a "$L"
  s=$(secs cli --embeddings "$T/l$n.npy" --out "$T/l$n.json" --center --quiet --device llvmpipe)
  echo "N=$n command line, lavapipe (--device llvmpipe), whole cache + JSON: $s s wall; $(cat "$T/run.out")" | tee -a "$L"
done
python3 -c "
import numpy as np
g = np.random.default_rng($SEED); n, d = 8359, 768
topics = g.standard_normal((256, d)); w = g.standard_normal((n, 256)) ** 3
e = w @ topics / 16 + 0.35 * g.standard_normal((n, d)) + 0.8 * g.standard_normal((1, d))
np.save('$T/seed.npy', e.astype(np.float32))"
target/release/examples/bench_host "$T/seed.npy" | tee -a "$L"
echo "floor for 8,359 x 768: N^3 x 4 bytes of G rows / the read bandwidth above" | tee -a "$L"
echo "log: $L"
