#!/usr/bin/env bash
# The main job with FJIT_TIMELINE set, on the committed 16-example fixture: the file it writes
# at exit is trace-event JSON with one track per replica (examples/check_timeline.cmake), and
# `fjit_timeline merge` writes the file(s) as one trace with the same tracks.
#   threads: 2 thread replicas, one file;   mpi: under `MPIEXEC -n 2`, one file per rank.
# usage: timeline_test.sh threads|mpi TRAIN_BINARY FJIT_TIMELINE_BINARY FIXTURE_DIR
#                         [MPIEXEC -n 2 FLAGS...]
set -euo pipefail
mode=$1 bin=$2 tool=$3 fixture=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_timeline_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
. "$here/fixture_data.sh"
fixture_data "$fixture" "$work"
args=(--data-dir "$work" --epochs 1 --batch-size 8 --log-every 0 --seed 5)
export FJIT_TIMELINE=$work/timeline.json FJIT_TIMELINE_STEPS=2
if [ "$mode" = threads ]; then
  "$bin" "${args[@]}" --replicas 2 > "$work/out" 2>&1 || { cat "$work/out"; exit 1; }
  files="$work/timeline.json"
else
  "$@" -x FJIT_TIMELINE -x FJIT_TIMELINE_STEPS "$bin" "${args[@]}" > "$work/out" 2>&1 ||
    { cat "$work/out"; exit 1; }
  files="$work/timeline.json;$work/timeline.rank1.json"
fi
cmake -DFILES="$files" -DTRACKS=2 -P "$here/check_timeline.cmake"
IFS=';' read -r -a inputs <<< "$files"
"$tool" merge "$work/merged.json" "${inputs[@]}"
grep -q '"time_base":"rank 0 clock"' "$work/merged.json" || [ "$mode" = threads ] ||
  { echo "merged trace not on rank 0's clock"; exit 1; }
cmake -DFILES="$work/merged.json" -DTRACKS=2 -P "$here/check_timeline.cmake"
