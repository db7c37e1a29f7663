#!/usr/bin/env bash
# End to end, before and after, in one run on the GPU machine (repo root, .gl/ carried: the
# loader .debs, .gl/bin/luajit, .gl/lua/diversity.so built from this tree, .gl/old/lua/diversity.so
# and .gl/old/lua-src/ (the lua/ folder) built from the "before" commit, and
# .gl/data/fortunes-minilm.f32). On the seed table (8,359 x 768, the PyTorch peer's) and on
# bench/make-real31k.py's 31,102 x 384 table: the command line (auto) with wall, GPU, peak RSS
# and the per-phase line; the old-ABI path as the user's wrapper drives it (bench/old_abi.lua:
# batches of 3,584, probe + adaptive chunks, then 100 single sequences). Outputs of before and
# after are compared byte for byte (SOURCE_DATE_EPOCH fixes generated_at). Writes $OUT/e2e.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
export SOURCE_DATE_EPOCH=1764547200
T=$(mktemp -d)
L=$OUT/e2e.log
E() { python3 bench/e2e.py "$@" 2>&1 | tee -a "$L"; }
NEW=(env "LUA_CPATH=.gl/lua/?.so;;" "LUA_PATH=lua/?.lua;lua/?/init.lua;;" .gl/bin/luajit lua/diversity/cli.lua)
OLD=(env "LUA_CPATH=.gl/old/lua/?.so;;" "LUA_PATH=.gl/old/lua-src/?.lua;.gl/old/lua-src/?/init.lua;;" .gl/bin/luajit .gl/old/lua-src/diversity/cli.lua)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log -1 --format='commit %h %s' 2>/dev/null; nproc; } | tee "$L"
h200_seed_npy "$T"
python3 bench/make-real31k.py .gl/data/fortunes-minilm.f32 "$T/r31.npy" | tee -a "$L"
for v in a b; do cp "$T/seed.npy" "$T/seed$v.npy"; cp "$T/r31.npy" "$T/r31$v.npy"; done
# Warm-up (clocks up, driver loaded): a short run.
"${NEW[@]}" --embeddings "$T/seed.npy" --top-k 200 --out "$T/w.json" --quiet >/dev/null 2>&1
# The seed table, twice each (the first run converts to fp16 and caches it beside the input).
for i in 1 2; do
  E "seed CLI before, run $i" -- "${OLD[@]}" --embeddings "$T/seeda.npy" --out "$T/sa.json" --quiet
  E "seed CLI after, run $i" -- "${NEW[@]}" --embeddings "$T/seedb.npy" --out "$T/sb.json" --quiet --verbose
done
cmp "$T/sa.json" "$T/sb.json" && echo "seed: before and after the same bytes" | tee -a "$L"
E "old-ABI after" -- .gl/bin/luajit bench/old_abi.lua .gl/lua/diversity.so "$T/seed.f32" 8359 768 3584 100
E "old-ABI before" -- .gl/bin/luajit bench/old_abi.lua .gl/old/lua/diversity.so "$T/seed.f32" 8359 768 3584 100
# The whole cache of the 31k table, centred, fp16, auto, JSON + binary.
E "real31k CLI after" -- "${NEW[@]}" --embeddings "$T/r31b.npy" --center --out "$T/rb.json" --binary "$T/rb.bin" --quiet --verbose
ls -l "$T"/rb.* | tee -a "$L"
E "real31k CLI before" -- "${OLD[@]}" --embeddings "$T/r31a.npy" --center --out "$T/ra.json" --binary "$T/ra.bin" --quiet
cmp "$T/ra.json" "$T/rb.json" && cmp "$T/ra.bin" "$T/rb.bin" && echo "real31k: before and after the same bytes" | tee -a "$L"
rm -rf "$T"
