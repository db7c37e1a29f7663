#!/usr/bin/env bash
# The Slurm recipe's tasks on a two-GPU machine without Slurm (issue 20): contrib/slurm/
# shard.sbatch run by hand as array tasks 1 and 2 at the same time, each with the
# CUDA_VISIBLE_DEVICES Slurm would give it (0 and 1: the script maps it to the Vulkan device),
# then merge.sbatch; against a one-shot run on GPU 0. For the diversity cache (the peer's 8,359 ×
# 768 seed table, gram, fp32) and the rankings + k-NN graph (same table, k = 100, graph k = 10):
# wall times, the speedup, `cmp` of the merged files with the one-shot ones, and nvidia-smi's
# per-GPU utilisation every 100 ms (both GPUs must be busy). Run on kind nvidia-h200-x2 from the
# repo root with .gl/ carried (bench/prepare-gl.sh: the Vulkan loader .debs, .gl/bin/luajit,
# .gl/lua/diversity.so, .gl/bin/rankings). Outputs packed into $OUT/shards-results.tgz.
set -uo pipefail
source "$(dirname "$0")/h200-env.sh"
h200_pack shards-results
export LUA_CPATH='.gl/lua/?.so;;' LUA_PATH='lua/?.lua;lua/?/init.lua;;' SOURCE_DATE_EPOCH=1700000000
export DIVERSITY_CLI=".gl/bin/luajit $PWD/lua/diversity/cli.lua" DIVERSITY_RANKINGS=$PWD/.gl/bin/rankings
T=$(mktemp -d)
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader -lms 100 > "$OUT/util.csv" &
POLL=$!
trap 'kill $POLL 2>/dev/null' EXIT
timeout 60 python3 bench/peer/torch_diversity.py --dump "$T/seed.f32"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
log() { echo "$*" | tee -a "$OUT/shards.log"; }
kind_args() { # kind → the run's own options
  case $1 in
    cache) echo "--embeddings $T/seed.f32 --dim 768 --mode gram --precision fp32 --batch 2090 --quiet" ;;
    rankings) echo "--table $T/seed.f32 --dim 768 --top-k 100" ;;
  esac
}
for rep in 1 2; do
  for kind in cache rankings; do
    one=$T/one-$kind-$rep out=$T/out-$kind-$rep
    mkdir -p "$one" "$out"
    t0=$(date +%s%N)
    # shellcheck disable=SC2046
    if [ $kind = cache ]; then
      DIVERSITY_DEVICE=0 timeout 300 $DIVERSITY_CLI $(kind_args cache) --out "$one/diversity_cache.json" 2>&1 | tee -a "$OUT/shards.log"
    else
      DIVERSITY_DEVICE=0 timeout 300 "$DIVERSITY_RANKINGS" $(kind_args rankings) --out "$one/rankings.json" --graph "$one/graph.knn" 2>&1 | tee -a "$OUT/shards.log"
    fi
    t_one=$(ms "$t0")
    t0=$(date +%s%N)
    pids=()
    for i in 1 2; do
      # shellcheck disable=SC2046
      SLURM_ARRAY_TASK_ID=$i CUDA_VISIBLE_DEVICES=$((i - 1)) DIVERSITY_SHARDS=2 DIVERSITY_OUTDIR=$out \
        DIVERSITY_KIND=$kind timeout 300 bash contrib/slurm/shard.sbatch $(kind_args $kind) \
        >"$OUT/$kind-$rep-task$i.log" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"
    t_shards=$(ms "$t0")
    t0=$(date +%s%N)
    DIVERSITY_SHARDS=2 DIVERSITY_OUTDIR=$out DIVERSITY_KIND=$kind timeout 300 bash contrib/slurm/merge.sbatch 2>&1 | tee -a "$OUT/shards.log"
    t_merge=$(ms "$t0")
    same=yes
    for f in diversity_cache.json rankings.json graph.knn; do
      [ -e "$one/$f" ] || continue
      cmp "$one/$f" "$out/$f" || same=no
    done
    log "$kind rep $rep: one GPU $t_one ms; two shards on GPUs 0,1 $t_shards ms + merge $t_merge ms; speedup $(python3 -c "print(f'{$t_one/max(1,$t_shards+$t_merge):.2f}x (shards alone {$t_one/max(1,$t_shards):.2f}x)')"); byte-identical: $same"
    cat "$OUT/$kind-$rep-task1.log" "$OUT/$kind-$rep-task2.log" >> "$OUT/shards.log"
  done
done
