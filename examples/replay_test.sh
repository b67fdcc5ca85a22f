#!/usr/bin/env bash
# Replay bundles of the poisoned-batch example (registered with CTest by
# examples/CMakeLists.txt), on the committed 16-example fixture, 2 thread replicas, batch 8:
#   nan    a NaN pixel (row 0 of replica 1's shard, column 400) at step 2: the run writes a
#          bundle for replica 1 under FJIT_CHECK_DUMP_DIR; its replay names the input that
#          brought the NaN, its row and column, and the op that reads it first.
#   label  a label 42 at the same place: the replay reproduces the model's label check (its
#          report has "max 42"), and its search names the loss op (softmax_xent checks its
#          labels) and the row of the bad label.
#   Also: without FJIT_CHECK_DUMP_DIR nothing is written; replaying with another model
#   configuration (a different --max-grad-norm) is refused as a different program (exit 2).
# usage: replay_test.sh POISONED_BATCH_BINARY FIXTURE_DIR
set -uo pipefail
bin=$1 fixture=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_replay.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

data=$work/data
. "$(dirname "$0")/fixture_data.sh"
fixture_data "$fixture" "$data"
opts=(--data-dir "$data" --batch-size 8 --max-steps 4 --log-every 0 --seed 3 --warmup-steps 0
      --replicas 2 --poison-step 2 --poison-replica 1)

# Without a dump directory: the run succeeds and writes nothing (HOME is the work dir, so a
# stray relative path would show up there too).
(cd "$work" && "$bin" "${opts[@]}" > "$work/plain.out" 2>&1) || { cat "$work/plain.out"; fail "plain run failed"; }
[ -z "$(find "$work" -name 'step*_replica*')" ] || fail "a bundle was written without FJIT_CHECK_DUMP_DIR"

for kind in nan label; do
  dump=$work/dump-$kind
  FJIT_CHECK_DUMP_DIR=$dump "$bin" "${opts[@]}" --poison "$kind" > "$work/run-$kind.out" 2>&1 ||
    { cat "$work/run-$kind.out"; fail "$kind: the poisoned run failed"; continue; }
  bundle=$dump/step1_replica1
  for f in inputs.safetensors meta.json report.txt; do
    [ -f "$bundle/$f" ] || fail "$kind: no $bundle/$f (dump dir holds: $(ls "$dump" 2>&1))"
  done
  "$bin" "${opts[@]}" --replay "$bundle" > "$work/replay-$kind.out" 2>&1
  rc=$?
  cat "$work/replay-$kind.out"
  [ $rc -eq 0 ] || fail "$kind: the replay exited $rc"
  out=$work/replay-$kind.out
  if [ "$kind" = nan ]; then
    grep -q "the non-finite values come with the input 'arg2'" "$out" || fail "nan: the images input is not named"
    grep -q "first at \[0, 400\] (row 0): nan" "$out" || fail "nan: the poisoned row and column are not named"
    grep -q "first read by " "$out" || fail "nan: the op reading the NaN is not named"
  else
    grep -q "labels must be classes in \[0, 10); batch has min [0-9]* max 42" "$out" ||
      fail "label: the replayed step did not raise the label check"
    # The loss op itself checks its labels: the search names it and the bad label's row.
    grep -q "first bad op in plan order: softmax_xent" "$out" || fail "label: the loss op is not named"
    grep -q "read index 42 at \[0\] (row 0) of operand 1, outside \[0, 10)" "$out" ||
      fail "label: the bad label's row is not named"
  fi
done

"$bin" "${opts[@]}" --max-grad-norm 5 --replay "$work/dump-nan/step1_replica1" > "$work/mismatch.out" 2>&1
rc=$?
[ $rc -eq 2 ] || { cat "$work/mismatch.out"; fail "replaying with another configuration exited $rc, not 2"; }
grep -q "different program" "$work/mismatch.out" || fail "the mismatch is not explained"

[ $failures -eq 0 ] && echo "replay_test: all passed"
exit $((failures > 0))
