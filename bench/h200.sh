#!/usr/bin/env bash
# The GPU benchmark run (SPEC §Performance), on the GPU machine from the repo root. Expects, in
# the ignored folder .gl/ (made by `bash bench/prepare-gl.sh` on the development machine and
# carried to the GPU machine):
#   .gl/bin/bench                  release build of examples/bench
#   .gl/data/fortunes-minilm.f32   the real fortunes table, 14,943 × 384 float32, row-major
#   .gl/*.deb                      Debian's libvulkan1 + libglvnd packages (see BENCHMARKS.md)
# Writes everything to $OUT, in this order, each step under its own timeout and the whole run
# under TOTAL_S (default 530 s) of wall time:
#   seed.*      the seed benchmark (the peer's synthetic 8,359 × 768 table, 3,584 sequences ×
#               500 steps), every scan kernel × shape × pipelining × precision, one process (the
#               same-bits column covers both kernels); seed.png is the fastest kernel's picture;
#               seed.best the fastest configuration ("kernel precision shape TFMA/s GPU-s")
#   peer_seed.log       the PyTorch peer on the seed table
#   whole.*     the whole cache of the seed table (8,359 × 8,358 steps), the fastest configuration
#   fortunes.*  the whole cache of the real fortunes table (14,943 × 14,942 steps, centered), the
#               fastest configuration
#   peer_n65536.log     the peer at N = 65,536
#   n65536.*    the seed workload on the peer's 65,536 × 768 table: the full configuration set of
#               the fastest kernel when the time left allows it, else both kernels' --quick set
set -uo pipefail
# The device tool brings back at most 8 files: pack everything into $OUT/scan-results.tgz on exit
# (the PNGs also stay beside it).
pack() { (cd "$OUT" && tar czf scan-results.tgz --exclude=scan-results.tgz -- * && find . -type f ! -name scan-results.tgz ! -name '*.png' -delete); }
trap pack EXIT
START=$SECONDS
TOTAL=${TOTAL_S:-530}
left() { echo $((TOTAL - (SECONDS - START))); }
# cap WANT RESERVE: a timeout of at most WANT seconds that leaves RESERVE seconds for what follows.
cap() {
  local l=$(($(left) - $2))
  ((l > $1)) && l=$1
  ((l < 10)) && l=10
  echo "$l"
}
step() { echo "== $(date +%T) +$((SECONDS - START)) s: $*" | tee -a "$OUT/steps.log"; }
source "$(dirname "$0")/h200-env.sh"
B=.gl/bin/bench
# The driver's tile (diversity.driver.tile_size: 85% of the H200's 60 MiB L2); the bench itself
# only converts bytes to rows.
TILE=(--tile-bytes 53477376)
FORTUNES=.gl/data/fortunes-minilm.f32
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -x "$B" ] || echo "missing $B (run bench/prepare-gl.sh)" | tee -a "$OUT/steps.log"
[ -f "$FORTUNES" ] || echo "missing $FORTUNES (run bench/prepare-gl.sh)" | tee -a "$OUT/steps.log"
step "dump tables"
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
timeout 60 python3 bench/peer/torch_diversity.py --n 65536 --dump "$T/n65536.f32"

step "seed, both kernels"
timeout "$(cap 200 280)" $B "${TILE[@]}" --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
  --kernels block64,block128 --budget-s 110 --label "seed 8359x768, 3584 x 500" \
  --json "$OUT/seed.json" --md "$OUT/seed.md" --plot "$OUT/seed.png" --best "$OUT/seed.best" \
  2>&1 | tee "$OUT/seed.log"
step "peer seed"
timeout "$(cap 90 250)" python3 bench/peer/torch_diversity.py --parts seed 2>&1 | tee "$OUT/peer_seed.log"

# The fastest configuration of the seed run; the old kernel's best if that run failed.
K=block64 P=fp16 SH=tiled R=10
[ -s "$OUT/seed.best" ] && read -r K P SH R _ < "$OUT/seed.best"
echo "fastest: kernel $K, $P, $SH, $R TFMA/s" | tee -a "$OUT/steps.log"
# Expected seconds of a workload of $1 multiply-adds at R TFMA/s.
est() { python3 -c "import sys; print(int(float(sys.argv[1]) / (max(float(sys.argv[2]), 0.5) * 1e12)) + 1)" "$1" "$R"; }
FAST=(--kernels "$K" --precisions "$P" --shapes "$SH" --quick --chunk 500)

step "whole cache 8359 (about $(est 4.5e14) s)"
timeout "$(cap 150 160)" $B "${TILE[@]}" --table "$T/seed.f32" --dim 768 "${FAST[@]}" \
  --label "whole cache 8359x768" --json "$OUT/whole.json" --md "$OUT/whole.md" \
  2>&1 | tee "$OUT/whole.log"
step "whole cache fortunes 14943 x 384 (about $(est 1.28e15) s)"
timeout "$(cap 300 100)" $B "${TILE[@]}" --table "$FORTUNES" --dim 384 --center "${FAST[@]}" \
  --label "whole cache fortunes 14943x384, centered" --json "$OUT/fortunes.json" \
  --md "$OUT/fortunes.md" 2>&1 | tee "$OUT/fortunes.log"
step "peer n65536"
timeout "$(cap 90 60)" python3 bench/peer/torch_diversity.py --n 65536 --parts seed 2>&1 | tee "$OUT/peer_n65536.log"

# N = 65,536: 3,584 × 500 × 65,536 × 768 = 9.0e13 multiply-adds a configuration.
PER=$(est 9.0e13)
LEFT=$(left)
((LEFT < 40)) && LEFT=40
if (((PER + 1) * 20 + 20 < LEFT)); then
  step "n65536, full set, kernel $K (about $((PER * 20)) s, $LEFT s left)"
  N65=(--kernels "$K")
else
  step "n65536, quick set, both kernels ($LEFT s left)"
  N65=(--kernels block64,block128 --quick)
fi
timeout "$(cap 400 5)" $B "${TILE[@]}" --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --chunk 50 \
  "${N65[@]}" --budget-s $((LEFT - 30)) --label "N 65536x768, 3584 x 500" \
  --json "$OUT/n65536.json" --md "$OUT/n65536.md" 2>&1 | tee "$OUT/n65536.log"
step "done"
