#!/usr/bin/env bash
# Submit a sharded diversity run to Slurm: a job array of N tasks, one shard each on one GPU
# (shard.sbatch), then the merge (merge.sbatch) with --dependency=afterok on the array, so it
# starts only when every task succeeded. Run from the repository root (or set DIVERSITY_HOME).
#
#   contrib/slurm/submit.sh --shards N --outdir DIR [--kind cache|rankings] [--no-gpu]
#       [--strided] [--only LIST] -- ARGS…
#
#   ARGS       the run's own options, the same for every task: for the cache, cli.lua's
#              (--embeddings FILE --top-k K …); for rankings, the rankings command's
#              (--table FILE --top-k K …). Not --out, --shard, --graph: the tasks set those.
#   --kind     cache (the default): DIR/cache.shard-i-of-N.json, merged to DIR/diversity_cache.json;
#              rankings: DIR/rankings.shard-i-of-N.json and DIR/graph.shard-i-of-N.knn, merged
#              to DIR/rankings.json and DIR/graph.knn (DIVERSITY_GRAPH=0: no graph)
#   --strided  shard i takes every N-th start (cache) or item (rankings) from the i-th, not the
#              i-th slice (spreads uneven work evenly)
#   --no-gpu   do not ask for --gres=gpu:1 (a cluster without GPU gres, or a CPU Vulkan device)
#   --only LIST  submit only these tasks (e.g. 2, or 2,5): re-run failed shards alone — the
#              cache tasks resume from their checkpoints — and merge again after them
#
# Prints "array JOBID" and "merge JOBID". Logs go to DIR/logs/. Other sbatch options come from
# sbatch's own environment variables (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT, …).
# If a task fails, the merge is cancelled (--kill-on-invalid-dep=yes); re-run that task with
# --only. The merge refuses a set with shards missing and names them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shards="" outdir="" kind=cache gpu=1 only=""
usage() { sed -n '4,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --shards) shards=${2:?--shards needs N}; shift 2 ;;
    --outdir) outdir=${2:?--outdir needs a directory}; shift 2 ;;
    --kind) kind=${2:?--kind needs cache or rankings}; shift 2 ;;
    --no-gpu) gpu=0; shift ;;
    --strided) export DIVERSITY_SHARD_LAYOUT=strided; shift ;;
    --only) only=${2:?--only needs a list of tasks}; shift 2 ;;
    --) shift; break ;;
    *) echo "submit.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --shards N (N >= 1) is required" >&2; usage; }
[ -n "$outdir" ] || { echo "submit.sh: --outdir DIR is required" >&2; usage; }
[ "$kind" = cache ] || [ "$kind" = rankings ] || { echo "submit.sh: --kind $kind: expected cache or rankings" >&2; exit 2; }
if [ -n "$only" ]; then
  for t in ${only//,/ }; do
    [[ $t =~ ^[1-9][0-9]*$ ]] && [ "$t" -le "$shards" ] \
      || { echo "submit.sh: --only $only: task $t is not one of 1..$shards" >&2; exit 2; }
  done
fi
mkdir -p "$outdir/logs"
outdir=$(cd "$outdir" && pwd)
export DIVERSITY_SHARDS=$shards DIVERSITY_OUTDIR=$outdir DIVERSITY_KIND=$kind
export DIVERSITY_HOME=${DIVERSITY_HOME:-$PWD}
gres=()
[ "$gpu" = 0 ] || gres=(--gres=gpu:1)
array=$(sbatch --parsable --array="${only:-1-$shards}" "${gres[@]}" \
  --output="$outdir/logs/shard-%a-%A.log" "$here/shard.sbatch" "$@")
array=${array%%;*}
merge=$(sbatch --parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes \
  --output="$outdir/logs/merge-%j.log" "$here/merge.sbatch")
echo "array ${array}"
echo "merge ${merge%%;*}"
