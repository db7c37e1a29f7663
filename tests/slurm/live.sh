#!/usr/bin/env bash
# The Slurm recipe (contrib/slurm/) on a live single-node Slurm: munged, slurmctld and slurmd
# from Debian's packages, started as root with their configuration, keys and state under a
# temporary directory, on free ports, and all stopped (trap) however the test ends. Then:
#   1. a 3-task diversity-cache array and its dependent merge, task 2 failing mid-run (an
#      injected device loss) the first time: the merge is cancelled, the merge job run by hand
#      refuses the set naming shard 2/3, task 2 re-run alone (--only 2) resumes from its
#      checkpoint, and the merged cache is byte-identical to a one-shot run;
#   2. a 3-task rankings array (strided) and its merge: rankings.json and graph.knn
#      byte-identical to a one-shot run.
# The tasks run on lavapipe, so no --gres=gpu (--no-gpu); CUDA_VISIBLE_DEVICES is passed
# through so that the tasks' device mapping is exercised: 0 for the cache (no nvidia-smi: Vulkan
# device 0, unverified, as the task log says), lavapipe's UUID (GPU-…) for the rankings.
# Needs root, the packages slurmctld slurmd slurm-client munge (scripts/setup-debian.sh), the
# release rankings example and the LuaJIT module (scripts/build-lua.sh) built.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
limit=${SLURM_TEST_TIMEOUT:-150}
D=$(mktemp -d /tmp/diversity-slurm.XXXXXX)
chmod 755 "$D"
stop() {
  local f pid
  for f in slurmd slurmctld munged; do
    if [ -s "$D/$f.pid" ]; then
      pid=$(cat "$D/$f.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
}
fail() {
  echo "slurm live test: $*" >&2
  for f in "$D"/*.log "$D"/out*/logs/*.log; do
    [ -e "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}
trap 'stop; rm -rf "$D"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# munge: its own key and socket.
dd if=/dev/urandom of="$D/munge.key" bs=1024 count=1 status=none
chmod 400 "$D/munge.key"
munged --force --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/munged.pid" \
  --log-file="$D/munged.log" --seed-file="$D/munge.seed"
host=$(hostname -s)
mkdir -p "$D/state" "$D/spool"
cat >"$D/slurm.conf" <<CONF
ClusterName=diversitytest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$D/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
deadline=$((SECONDS + limit))
until sinfo -h -o %t 2>/dev/null | grep -qx idle; do
  [ $SECONDS -lt $deadline ] || fail "the node never became idle: $(sinfo 2>&1)"
  sleep 0.5
done

# Wait until none of the jobs is queued or running.
wait_jobs() {
  while [ -n "$(squeue -h -j "$(IFS=,; echo "$*")" -o %i 2>/dev/null)" ]; do
    [ $SECONDS -lt $deadline ] || fail "jobs $* still queued after ${limit}s: $(squeue 2>&1)"
    sleep 0.5
  done
}
ids() { sed -n "s/^$1 //p" <<<"$2"; }

export SOURCE_DATE_EPOCH=1700000000 CUDA_VISIBLE_DEVICES=0
export LUA_CPATH="$repo/target/lua/?.so;;" LUA_PATH="$repo/lua/?.lua;$repo/lua/?/init.lua;;"
table=$repo/data/fortunes-300.embeddings.json
cache_args=(--embeddings "$table" --top-k 16 --batch 25 --quiet)
rank_args=(--table "$table" --top-k 7 --graph-k 5)
one=$D/one
mkdir -p "$one"
# The one-shot run on the device the tasks map (CUDA_VISIBLE_DEVICES=0 below: Vulkan device 0;
# with no device named, sequences would run on the host engine on a CPU-only machine).
DIVERSITY_DEVICE=0 luajit lua/diversity/cli.lua "${cache_args[@]}" --out "$one/diversity_cache.json" >/dev/null
target/release/examples/rankings "${rank_args[@]}" --out "$one/rankings.json" \
  --graph "$one/graph.knn" >/dev/null

# 1. The cache: task 2 fails mid-run, the merge is cancelled, task 2 resumes alone.
out=$D/out-cache
sub=$(DIVERSITY_CLI="bash $repo/tests/slurm/flaky-cli.sh" contrib/slurm/submit.sh --no-gpu \
  --shards 3 --outdir "$out" -- "${cache_args[@]}")
wait_jobs "$(ids array "$sub")" "$(ids merge "$sub")"
[ -e "$out/.task2-failed-once" ] || fail "task 2 was never run"
[ ! -e "$out/diversity_cache.json" ] || fail "the merge ran although task 2 failed"
[ ! -e "$out/cache.shard-2-of-3.json" ] || fail "task 2 wrote its shard although it failed"
[ -d "$out/cache.shard-2-of-3.json.partial" ] || fail "task 2 left no checkpoint"
for i in 1 3; do [ -s "$out/cache.shard-$i-of-3.json" ] || fail "task $i wrote no shard"; done
grep -q "device 0 (CUDA_VISIBLE_DEVICES=0 taken as a Vulkan device index, not verified" \
  "$out"/logs/shard-1-*.log || fail "the task did not map CUDA_VISIBLE_DEVICES=0 (or said nothing)"
[ ! -e "$out/cache.shard-1-of-3.json.partial" ] || fail "task 1 left its checkpoint behind"
msg=$(DIVERSITY_SHARDS=3 DIVERSITY_OUTDIR=$out bash contrib/slurm/merge.sbatch 2>&1) \
  && fail "the merge accepted shards 1 and 3 of 3"
grep -q "shard(s) 2/3 missing" <<<"$msg" || fail "the merge did not name shard 2/3: $msg"
[ ! -e "$out/diversity_cache.json" ] || fail "the refused merge wrote a cache"
sub=$(DIVERSITY_CLI="bash $repo/tests/slurm/flaky-cli.sh" contrib/slurm/submit.sh --no-gpu \
  --shards 3 --outdir "$out" --only 2 -- "${cache_args[@]}")
wait_jobs "$(ids array "$sub")" "$(ids merge "$sub")"
grep -q "from the checkpoint" "$out"/logs/shard-2-"$(ids array "$sub")".log \
  || fail "task 2 did not resume from its checkpoint"
cmp "$one/diversity_cache.json" "$out/diversity_cache.json" \
  || fail "the merged cache differs from the one-shot run's"

# 2. Rankings and the k-NN graph, strided shards, the device named by its UUID.
out=$D/out-rankings
uuid=$(luajit -e 'io.write(require("diversity").devices()[1].uuid)')
[[ $uuid =~ ^GPU- ]] || fail "no device UUID: '$uuid'"
sub=$(CUDA_VISIBLE_DEVICES=$uuid contrib/slurm/submit.sh --no-gpu --kind rankings --strided \
  --shards 3 --outdir "$out" -- "${rank_args[@]}")
wait_jobs "$(ids array "$sub")" "$(ids merge "$sub")"
cmp "$one/rankings.json" "$out/rankings.json" || fail "the merged rankings differ"
cmp "$one/graph.knn" "$out/graph.knn" || fail "the merged k-NN graph differs"
grep -q "shard 1/3:strided" "$out"/logs/shard-1-*.log || fail "the rankings shards were not strided"
grep -q "device $uuid (the UUID in CUDA_VISIBLE_DEVICES)" "$out"/logs/shard-1-*.log \
  || fail "the task did not take its device by UUID"
echo "slurm live test: 3-task cache array (task 2 failed, resumed alone) and 3-task rankings array merged byte-identically in ${SECONDS}s"
