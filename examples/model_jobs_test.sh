#!/usr/bin/env bash
# Smoke runs of the CNN and ViT jobs (train_cnn, train_vit; registered with CTest by
# examples/CMakeLists.txt) on the committed 16-example fixture posing as both splits:
#   threads  2 thread replicas, 4 epochs: exit 0, the epoch training loss falls, a final test
#            accuracy is printed, no check raised.
#   mpi      the same run under `MPIEXEC -n 2`: its epoch lines (losses, accuracies) equal
#            the thread run's, dropout included (each replica's key is folded with its index).
# usage: model_jobs_test.sh threads|mpi TRAIN_BINARY FIXTURE_DIR [MPIEXEC -n 2 FLAGS...]
set -uo pipefail
mode=$1 bin=$2 fixture=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_model_jobs.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

data=$work/data
. "$(dirname "$0")/fixture_data.sh"
fixture_data "$fixture" "$data"
small=(--data-dir "$data" --epochs 4 --batch-size 8 --log-every 0 --seed 3 --warmup-steps 0)
epoch_lines() { grep '^== epoch' "$1" | sed -e 's/ (eval.*//'; }

"$bin" "${small[@]}" --replicas 2 > "$work/threads.out" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$work/threads.out"; fail "thread run exited $rc"; }
grep -q 'final test accuracy' "$work/threads.out" || fail "no final accuracy"
grep -q 'checks_raised=0' "$work/threads.out" || fail "a check was raised"
first=$(epoch_lines "$work/threads.out" | head -1 | sed -e 's/.*train loss \([0-9.]*\).*/\1/')
last=$(epoch_lines "$work/threads.out" | tail -1 | sed -e 's/.*train loss \([0-9.]*\).*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
  fail "the training loss did not fall ($first -> $last)"

if [ "$mode" = mpi ]; then
  "$@" "$bin" "${small[@]}" > "$work/mpi.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$work/mpi.out"; fail "mpi run exited $rc"; }
  grep -q 'replica(s) (MPI ranks)' "$work/mpi.out" || fail "the MPI run did not use MPI ranks"
  [ "$(epoch_lines "$work/mpi.out" | wc -l)" -eq 4 ] || fail "the MPI run printed no 4 epoch lines"
  diff <(epoch_lines "$work/threads.out") <(epoch_lines "$work/mpi.out") ||
    fail "MPI ranks and thread replicas trained differently"
fi
[ $failures -eq 0 ] && echo "model_jobs_test $mode $(basename "$bin"): ok"
exit $((failures > 0))
