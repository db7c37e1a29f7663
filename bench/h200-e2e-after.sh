#!/usr/bin/env bash
# The "after" half of bench/h200-e2e.sh (same tables, same commands), with the host steps timed
# one by one (bench/host_io.lua) on the seed table, then the 31k table's "before" again (when
# .gl/old/ is there and BEFORE is not 0) to compare the outputs byte for byte. Writes $OUT/e2e-after.log.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
export SOURCE_DATE_EPOCH=1764547200
T=$(mktemp -d)
L=$OUT/e2e-after.log
E() { python3 bench/e2e.py "$@" 2>&1 | tee -a "$L"; }
NEW=(env "LUA_CPATH=.gl/lua/?.so;;" "LUA_PATH=lua/?.lua;lua/?/init.lua;;" .gl/bin/luajit lua/diversity/cli.lua)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "nproc $(nproc), cpu.max $(cat /sys/fs/cgroup/cpu.max 2>/dev/null)"; } | tee "$L"
h200_seed_npy "$T"
python3 bench/make-real31k.py .gl/data/fortunes-minilm.f32 "$T/r31.npy" | tee -a "$L"
"${NEW[@]}" --embeddings "$T/seed.npy" --top-k 200 --out "$T/w.json" --quiet >/dev/null 2>&1
LUA_CPATH=".gl/lua/?.so;;" LUA_PATH="lua/?.lua;lua/?/init.lua;;" .gl/bin/luajit bench/host_io.lua "$T/seed.npy" "$T" 2>&1 | tee -a "$L"
rm -f "$T"/io*
for i in 1 2; do
  E "seed CLI after, run $i" -- "${NEW[@]}" --embeddings "$T/seed.npy" --out "$T/sb.json" --quiet --verbose
done
# The same in one batch (the gram default before batches were capped at a quarter of the starts).
E "seed CLI after, one batch" -- "${NEW[@]}" --embeddings "$T/seed.npy" --out "$T/s1.json" --batch 8359 --quiet --verbose
E "old-ABI after" -- .gl/bin/luajit bench/old_abi.lua .gl/lua/diversity.so "$T/seed.f32" 8359 768 3584 100
E "real31k CLI after" -- "${NEW[@]}" --embeddings "$T/r31.npy" --center --out "$T/rb.json" --binary "$T/rb.bin" --quiet --verbose
ls -l "$T"/rb.* | tee -a "$L"
OLD=(env "LUA_CPATH=.gl/old/lua/?.so;;" "LUA_PATH=.gl/old/lua-src/?.lua;.gl/old/lua-src/?/init.lua;;" .gl/bin/luajit .gl/old/lua-src/diversity/cli.lua)
if [ -e .gl/old/lua/diversity.so ] && [ "${BEFORE:-1}" = 1 ]; then
  E "real31k CLI before" -- "${OLD[@]}" --embeddings "$T/r31.npy" --center --out "$T/ra.json" --binary "$T/ra.bin" --quiet
  cmp "$T/ra.json" "$T/rb.json" && cmp "$T/ra.bin" "$T/rb.bin" && echo "real31k: before and after the same bytes" | tee -a "$L"
fi
rm -rf "$T"
