#!/usr/bin/env bash
# Fixed-point keys partly in shared memory (GramOptions::shared_keys, `+skK` variants of
# bench_gram: each lane's last K keys in shared memory, fewer registers a lane, the same bits):
# does a second resident workgroup an SM pay for the shared-memory traffic? Whole caches of the
# fortunes (59 keys a lane at 256 invocations: sk26 leaves 33 in registers, the peer's count, which
# the driver gave 128 registers), the peer's table (33: sk8, sk16) and real31k's first 2,048
# sequences (61 at 512: sk14). Registers from the driver's statistics first. .gl/bin/bench_gram_hyb
# is bench_gram of branch h-hyb. GPU machine, repo root, .gl/ carried. $OUT/hybrid.log.
set -uo pipefail
source bench/h200-env.sh
B=.gl/bin
T=$(mktemp -d)
L=$OUT/hybrid.log
h200_gram_tables "$T" >> "$L" 2>&1  # (not piped: it sets FORT and R31)
G=$B/bench_gram_hyb
timeout 60 $G --table "$T/fortunes.npy" --starts 4096 --steps 500 --label warm-up > /dev/null 2>&1
for v in c c+sk26 c+sk36; do
  DIVERSITY_PIPELINE_STATS=1 timeout 60 $G --table "$T/fortunes.npy" --center --precisions fp16 --starts 132 --steps 20 --judge-variants $v --label "stats $v" 2>&1 | grep -E "gram_fixed|GPU" | tee -a "$L"
done
for i in 1 2; do
  timeout 120 $G --table "$T/fortunes.npy" --center --precisions fp16 --judge-variants c,c+sk26,c+sk30,c+sk36 --label "fortunes" 2>&1 | tee -a "$L"
  timeout 100 $G --table "$T/seed.npy" --precisions fp32 --judge-variants c,c+sk8,c+sk16 --label "peer" 2>&1 | tee -a "$L"
done
timeout 120 $G --table "$R31" --center --precisions fp16 --starts 2048 --judge-variants c,c+sk8,c+sk14 --label "real31k 2048 full" 2>&1 | tee -a "$L"
rm -rf "$T"
echo "== $(date +%T) hybrid done" | tee -a "$L"
