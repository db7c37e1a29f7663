#!/usr/bin/env bash
# The diversity CLI as the live Slurm test runs it (DIVERSITY_CLI): task 2 of the array, the
# first time only, loses its device after 3 submissions (DIVERSITY_FAIL_AFTER_CHUNKS), so it
# fails mid-run with a checkpoint written, as a task on a failing GPU would.
set -euo pipefail
marker="$DIVERSITY_OUTDIR/.task2-failed-once"
if [ "${SLURM_ARRAY_TASK_ID:-}" = 2 ] && [ ! -e "$marker" ]; then
  touch "$marker"
  export DIVERSITY_FAIL_AFTER_CHUNKS=3
fi
exec luajit "$DIVERSITY_HOME/lua/diversity/cli.lua" "$@"
