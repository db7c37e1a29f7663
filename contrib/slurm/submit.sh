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
#              (--table FILE --top-k K …). Not --out, --shard, --graph, --resume: the tasks set
#              those; not --device, --devices: each task runs on the GPU Slurm grants it
#              (DIVERSITY_DEVICE, exported, names one device for every task instead).
#   --kind     cache (the default): DIR/cache.shard-i-of-N.json, merged to DIR/diversity_cache.json;
#              rankings: DIR/rankings.shard-i-of-N.json and DIR/graph.shard-i-of-N.knn, merged
#              to DIR/rankings.json and DIR/graph.knn (DIVERSITY_GRAPH=0: no graph)
#   --strided  shard i takes every N-th start (cache) or item (rankings) from the i-th, not the
#              i-th slice (spreads uneven work evenly)
#   --no-gpu   do not ask for --gres=gpu:1 (a cluster without GPU gres, or a CPU Vulkan device)
#   --shards N   the number of tasks, 1 to 4000000 (Slurm's largest job array; the cluster's
#              MaxArraySize may allow fewer, sbatch then refuses)
#   --only LIST  submit only these tasks (e.g. 2, or 2,5; each from 1 to N, once): re-run failed
#              shards alone — the cache tasks resume from their checkpoints — and merge again
#              after them
#
# Prints "array JOBID" and "merge JOBID". Logs go to DIR/logs/. Other sbatch options come from
# sbatch's own environment variables (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT, …).
# If a task fails, the merge is cancelled (--kill-on-invalid-dep=yes); re-run that task with
# --only. The merge refuses a set with shards missing and names them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shards="" outdir="" kind=cache gpu=1 only=""
usage() { sed -n '4,24p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
fail() { echo "submit.sh: $*" >&2; exit 2; }
# The value of option $1 (the next argument, $2), refused when missing or empty.
value() { [ $# -ge 2 ] && [ -n "$2" ] || fail "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case $1 in
    --shards) value "$@"; shards=$2; shift 2 ;;
    --outdir) value "$@"; outdir=$2; shift 2 ;;
    --kind) value "$@"; kind=$2; shift 2 ;;
    --no-gpu) gpu=0; shift ;;
    --strided) export DIVERSITY_SHARD_LAYOUT=strided; shift ;;
    --only) value "$@"; only=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "submit.sh: unknown argument $1" >&2; usage ;;
  esac
done
# Everything is checked before anything is created or submitted.
[ -n "$shards" ] || { echo "submit.sh: --shards N (N >= 1) is required" >&2; usage; }
# At most 7 digits before any arithmetic (a longer number would overflow the shell's).
[[ $shards =~ ^[1-9][0-9]{0,6}$ ]] && [ "$shards" -le 4000000 ] \
  || fail "--shards '$shards': expected a whole number of tasks from 1 to 4000000 (Slurm's largest job array)"
[ -n "$outdir" ] || { echo "submit.sh: --outdir DIR is required" >&2; usage; }
[ "$kind" = cache ] || [ "$kind" = rankings ] || fail "--kind $kind: expected cache or rankings"
if [ -n "$only" ]; then
  [[ $only =~ ^[0-9]+(,[0-9]+)*$ ]] \
    || fail "--only '$only': expected a comma-separated list of tasks from 1 to $shards (e.g. 2 or 2,5), no empty items"
  seen=,
  for t in ${only//,/ }; do
    [[ $t =~ ^[1-9][0-9]{0,6}$ ]] && [ "$t" -le "$shards" ] \
      || fail "--only '$only': task $t is not one of 1..$shards"
    [[ $seen != *",$t,"* ]] || fail "--only '$only': task $t is listed twice"
    seen="$seen$t,"
  done
fi
for a in "$@"; do
  case $a in
    --out | --out=* | --shard | --shard=* | --graph | --graph=* | --resume | --resume=*)
      fail "ARGS: ${a%%=*} is set by each task itself (its shard, its files under --outdir); leave it out" ;;
    --device | --device=* | --devices | --devices=*)
      fail "ARGS: ${a%%=*} would put every task on the same device; each task takes the GPU Slurm grants it (set DIVERSITY_DEVICE to force one)" ;;
  esac
done
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
