#!/usr/bin/env bash
# The main job's --log-dir read by TensorBoard itself (registered with CTest by
# examples/CMakeLists.txt): a small run on the committed fixture writes scalars.jsonl and an
# event file; examples/check_tensorboard.py loads the directory with TensorBoard's
# EventAccumulator and compares every scalar with the JSON lines. Exit 77 (skipped) when
# python3 or tensorboard is missing.
# usage: tensorboard_test.sh TRAIN_BINARY FIXTURE_DIR
set -uo pipefail
bin=$1 fixture=$2
command -v python3 > /dev/null || { echo "no python3: skipped"; exit 77; }
python3 -c "import tensorboard" 2> /dev/null || { echo "tensorboard is not importable: skipped"; exit 77; }
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_tb_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/fixture_data.sh"
fixture_data "$fixture" "$work/data"
"$bin" --data-dir "$work/data" --epochs 2 --batch-size 8 --log-every 1 --seed 5 --replicas 2 \
  --log-dir "$work/logs" > "$work/run.out" 2>&1 || { cat "$work/run.out"; echo "FAIL: training exited"; exit 1; }
python3 "$(dirname "$0")/check_tensorboard.py" "$work/logs"
