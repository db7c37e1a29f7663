#!/usr/bin/env bash
# The gram-engine benchmark run (SPEC §Performance, issue 5) on the GPU machine, from the repo
# root, with .gl/ carried (bench/prepare-gl.sh: .gl/bin/bench_gram, .gl/data/fortunes-minilm.f32,
# the Vulkan loader .debs). Writes to $OUT:
#   gram_seed_whole.*    whole cache of the peer's 8,359 × 768 table: G build, every workgroup
#                        size × placement (+ one step per dispatch), fp32 and fp16, same bits,
#                        oracle on 16 sequences, end to end with the JSON cache on disk
#   peer_seed_full.log   the torch gram peer, whole cache, same table; agreement with ours
#   gram_fortunes*.*     whole cache of the real fortunes table 14,943 × 384, centered (the
#                        user's space) and not; oracle; the torch gram peer on the uncentered one
#   gram_seed500.*       the seed workload (3,584 sequences × 500 steps)
#   gram_n65536.*        the seed workload at N = 65,536 (G = 16 GiB in slabs; state in memory)
set -uo pipefail
# The device tool brings back at most 8 files: pack everything into $OUT/gram-results.tgz on exit
# (the PNGs also stay beside it).
pack() { (cd "$OUT" && tar czf gram-results.tgz --exclude=gram-results.tgz -- * && find . -type f ! -name gram-results.tgz ! -name '*.png' -delete); }
trap pack EXIT
START=$SECONDS
step() { echo "== $(date +%T) +$((SECONDS - START)) s: $*" | tee -a "$OUT/gram_steps.log"; }
source "$(dirname "$0")/h200-env.sh"
G=.gl/bin/bench_gram
FORTUNES=.gl/data/fortunes-minilm.f32
PEER=bench/peer/torch_diversity.py
T=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
step "dump the seed table"
timeout 60 python3 $PEER --dump "$T/seed.f32"

step "whole cache 8359 x 768"
timeout 200 $G --table "$T/seed.f32" --dim 768 --precisions fp32,fp16 --wg 256,512,1024 \
  --placements registers,memory --oracle 16 --seqs "$T/ours_seed.u32" --e2e "$T/cache.json" \
  --label "gram whole cache 8359x768" --json "$OUT/gram_seed_whole.json" \
  --md "$OUT/gram_seed_whole.md" 2>&1 | tee "$OUT/gram_seed_whole.log"
step "same, one step per dispatch (same bits as the in-shader loop?)"
timeout 100 $G --table "$T/seed.f32" --dim 768 --precisions fp32 --wg 256 --spd 0,1 \
  --label "gram whole cache 8359x768, steps per dispatch" --json "$OUT/gram_seed_spd.json" \
  --md "$OUT/gram_seed_spd.md" 2>&1 | tee "$OUT/gram_seed_spd.log"
step "peer: gram whole cache 8359"
timeout 120 python3 $PEER --parts none --full-gram --out "$T/peer_seed.npy" 2>&1 | tee "$OUT/peer_seed_full.log"
timeout 60 python3 bench/compare_seqs.py "$T/ours_seed.u32" "$T/peer_seed.npy" "whole 8359" 2>&1 | tee -a "$OUT/peer_seed_full.log"

step "whole cache fortunes 14943 x 384, centered"
timeout 200 $G --table "$FORTUNES" --dim 384 --center --precisions fp32,fp16 --wg 512,1024 \
  --placements registers,memory --oracle 16 --label "gram whole cache fortunes 14943x384, centered" \
  --json "$OUT/gram_fortunes.json" --md "$OUT/gram_fortunes.md" 2>&1 | tee "$OUT/gram_fortunes.log"
step "whole cache fortunes, not centered, + peer"
timeout 100 $G --table "$FORTUNES" --dim 384 --precisions fp32 --wg 512 --oracle 16 \
  --seqs "$T/ours_fortunes.u32" --label "gram whole cache fortunes 14943x384" \
  --json "$OUT/gram_fortunes_raw.json" --md "$OUT/gram_fortunes_raw.md" 2>&1 | tee "$OUT/gram_fortunes_raw.log"
timeout 150 python3 $PEER --data "$FORTUNES" --n 14943 --d 384 --parts none --full-gram \
  --out "$T/peer_fortunes.npy" 2>&1 | tee "$OUT/peer_fortunes_full.log"
timeout 60 python3 bench/compare_seqs.py "$T/ours_fortunes.u32" "$T/peer_fortunes.npy" "fortunes" 2>&1 | tee -a "$OUT/peer_fortunes_full.log"

step "seed workload 3584 x 500"
timeout 60 $G --table "$T/seed.f32" --dim 768 --starts 3584 --steps 500 --precisions fp32,fp16 \
  --wg 256,512 --label "gram seed 8359x768, 3584 x 500" --json "$OUT/gram_seed500.json" \
  --md "$OUT/gram_seed500.md" 2>&1 | tee "$OUT/gram_seed500.log"
step "N = 65536, seed workload"
timeout 60 python3 $PEER --n 65536 --dump "$T/n65536.f32"
timeout 150 $G --table "$T/n65536.f32" --dim 768 --starts 3584 --steps 500 --precisions fp16,fp32 \
  --wg 512,1024 --placements memory --label "gram N 65536x768, 3584 x 500" \
  --json "$OUT/gram_n65536.json" --md "$OUT/gram_n65536.md" 2>&1 | tee "$OUT/gram_n65536.log"
step "done"
