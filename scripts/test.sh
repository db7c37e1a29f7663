#!/usr/bin/env bash
# The test command (README.md, .ci/run): installs what is missing, checks formatting and lints,
# runs every Rust test (and a crate that depends on this one) on the machine's Vulkan device (lavapipe without a GPU) with validation
# layers on, the scan and filter tests once more with lavapipe's subgroup size at 4, then builds
# the LuaJIT module, runs the Slurm recipe on a live single-node Slurm (root, ~30 s) and the
# busted specs under LuaJIT against the module.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-debian.sh
# Where the best Vulkan device is a CPU (lavapipe), diversity sequences run on the native host
# engine by default; the tests name lavapipe so that every shader still runs there (tests/host.rs
# and tests/lua/host_spec.lua run the host engine and its default choice). An exported
# DIVERSITY_DEVICE (a GPU's name, say) wins.
export DIVERSITY_DEVICE="${DIVERSITY_DEVICE:-llvmpipe}"
# Line tables only (backtraces keep their lines) instead of the release profile's fuller debug
# info, for every build of this run alike (the dependent crate and the rock share target/):
# about thirty test and example binaries link faster.
export CARGO_PROFILE_RELEASE_DEBUG="${CARGO_PROFILE_RELEASE_DEBUG:-line-tables-only}"
# Where the time goes: each phase's end, seconds since the start, on stderr.
phase() { echo "test.sh: $1 done at ${SECONDS} s" >&2; }
cargo fmt --check
cargo clippy --release --all-targets --quiet -- -D warnings
cargo clippy --release --features lua --lib --quiet -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --features lua --quiet
phase "fmt, clippy, doc"
cargo test --release
phase "cargo test"
# A crate depending on this one (`cargo add --path`) builds and runs the README's Rust example.
bash scripts/dependent-crate.sh >/dev/null
phase "dependent crate"
# Again at subgroup size 4, but for the scan's two sweeps of the host's shapes over one table
# (they take about 2 minutes; every shader they run runs at size 4 in the oracle and edge-shape
# tests).
LP_NATIVE_VECTOR_WIDTH=128 cargo test --release --test scan --test filter --test gram --test gram_fixed --test knn --test multi \
  -- --skip same_bits_across_shapes_tiles_chunks_batches_and_order --skip block128_kernel_gives_the_same_bits_as_block64
phase "tests at subgroup size 4"
# The benchmark program must keep working: a tiny run on the bundled data.
cargo run --release --quiet --example bench -- --table data/fortunes-2k.npy --starts 16 \
  --steps 2 --chunk 1 --quick --label "CI smoke" --plot "$(mktemp -d)/smoke.png" >/dev/null
# The filter stand-in beside Block64, with the probe and with the judge's workgroup set: a band
# line with the same bits, and no line with other bits.
smoke_log=$(mktemp)
for extra in --probe "--workgroup 32"; do
  # shellcheck disable=SC2086 # $extra is a flag and, for --workgroup, its value
  cargo run --release --quiet --example bench -- --table data/fortunes-2k.npy --starts 16 \
    --steps 2 --chunk 1 --quick --kernels block64,filter $extra --label "CI smoke" >"$smoke_log" 2>&1
  grep -q "same bits: yes  band mean" "$smoke_log" && ! grep -q "same bits: NO" "$smoke_log" \
    || { cat "$smoke_log" >&2; echo "bench --kernels block64,filter $extra: not the same bits" >&2; exit 1; }
done
rm -f "$smoke_log"
cargo run --release --quiet --example bench_gram -- --table data/fortunes-2k.npy --starts 8 \
  --steps 20 --wg 32,64 --placements registers,memory --compensated d,1,0 --spd 0,1 --oracle 2 \
  --e2e "$(mktemp -d)/e2e.json" --label "CI smoke" >/dev/null
# Its batches: the same sequences in batches of 3 (the last one short) as in one.
gram_dir=$(mktemp -d)
for b in 8 3; do
  cargo run --release --quiet --example bench_gram -- --table data/fortunes-2k.npy --starts 8 \
    --steps 20 --batch "$b" --seqs "$gram_dir/batch-$b.u32" --label "CI smoke, batches of $b" >/dev/null
done
cmp "$gram_dir/batch-8.u32" "$gram_dir/batch-3.u32" \
  || { echo "bench_gram --batch 3: other sequences than one batch" >&2; exit 1; }
rm -rf "$gram_dir"
# The host engine's benchmark (about 1 s): the whole cache of 600 fortunes.
cargo run --release --quiet --example bench_host -- data/fortunes-2k.npy --n 600 --center >/dev/null
cargo run --release --quiet --example bench_knn -- --table data/fortunes-2k.npy --n 300 \
  --k 10,all --precisions fp32,fp16 --variants auto,tiles,fused,nowarp --devices 0,0 --repeat 2 --verify 8 \
  --label "CI smoke" >/dev/null
# k-means + IVF-Flat (about 1 s): exits 1 unless nprobe = nlist reproduces the exact search.
cargo run --release --quiet --example bench_ivf -- --table data/fortunes-2k.npy --n 1200 \
  --queries tail:100 --nlist 16 --iters 4 --nprobe 2 --metric cosine --precision fp16 \
  --label "CI smoke" >/dev/null
# The same without subgroup operations (the block select's shared-memory merge; about 1 s).
DIVERSITY_DISABLE=subgroups cargo run --release --quiet --example bench_ivf -- --table data/fortunes-2k.npy \
  --n 1200 --queries tail:100 --nlist 16 --iters 4 --nprobe 2 --metric cosine --precision fp16 \
  --label "CI smoke, no subgroups" >/dev/null
# IVF-PQ with the exact re-rank (about 2 s).
cargo run --release --quiet --example bench_ivf -- --table data/fortunes-2k.npy --n 1200 \
  --queries tail:100 --nlist 16 --iters 4 --nprobe 2 --metric cosine --pq 16 --refine 2 \
  --label "CI smoke" >/dev/null
smoke=$(mktemp -d)
cargo run --release --quiet --example rankings -- --table data/fortunes-300.embeddings.json \
  --top-k 5 --out "$smoke/rankings.json" --graph "$smoke/graph.knn" --verify 16 >/dev/null
# Sequences on demand and a grown cache, on the host engine (about 1 s): each exits 1 unless
# its answers are the batch job's / a fresh run's.
cargo run --release --quiet --example bench_query -- --table data/fortunes-2k.npy --n 300 --k 20 \
  --queries 5 --batch 4 --device host --label "CI smoke" >/dev/null
cargo run --release --quiet --example bench_grow -- --table data/fortunes-2k.npy --n 300 --top-k 10 \
  --device host --label "CI smoke" >/dev/null
phase "example smokes"
bash scripts/build-lua.sh
phase "LuaJIT module"
# The Slurm recipe (contrib/slurm) on a single-node Slurm it starts and stops; needs root.
# (Without DIVERSITY_DEVICE: its tasks map the GPU Slurm grants, which names a device.)
if [ "$(id -u)" -eq 0 ]; then env -u DIVERSITY_DEVICE bash tests/slurm/live.sh
else sudo -E env -u DIVERSITY_DEVICE bash tests/slurm/live.sh; fi
# The rock: luarocks make into a temporary tree, then the command and require from outside (~2 s).
phase "Slurm"
bash scripts/rock.sh
phase "rock"
log=$(mktemp)
LUA_CPATH='target/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;tests/lua/?.lua;;' \
  luajit /usr/bin/busted --output=plainTerminal tests/lua | tee "$log"
# busted's summary, in the plain form CI reads ("N passed, N failed").
sed -n 's/^\([0-9]*\) successes* \/ \([0-9]*\) failures* \/ \([0-9]*\) errors*.*/busted: \1 passed, \2 failed/p' "$log"
rm -f "$log"
phase "busted"
