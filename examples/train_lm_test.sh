#!/usr/bin/env bash
# Smoke runs of the language-model job (train_lm; registered with CTest by
# examples/CMakeLists.txt) on a small model and the committed text fixture:
#   threads  2 thread replicas: exit 0, the validation loss falls, no check raised; a run cut
#            at half its steps and resumed, and one killed (SIGKILL) mid-run and resumed, end
#            with a checkpoint of the uninterrupted run's state (checkpoint_state.sh: the
#            state hash of parameters and optimizer state, and the position); --generate
#            samples from the checkpoint with one compiled step; bad corpora (empty, a
#            non-text byte, shorter than one batch) are errors that name the file; fjit_verify
#            (next to TRAIN_LM) re-executes the resumed run's interval from the checkpoint it
#            resumed from, bit-identical.
#   mpi      the same run under `MPIEXEC -n 2`: its validation lines equal the thread run's,
#            and its final checkpoint holds the same state; fjit_verify re-executes its
#            checkpoint intervals with thread replicas, bit-identical; and under ZeRO stage 3
#            (--zero 3, with --export-hf) the same validation lines and final state.
# usage: train_lm_test.sh threads|mpi TRAIN_LM CORPUS [MPIEXEC -n 2 FLAGS...]
set -uo pipefail
mode=$1 bin=$2 corpus=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_train_lm.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

small=(--corpus "$corpus" --layers 2 --dim 64 --heads 2 --context 32 --batch-size 8
       --steps 40 --warmup-steps 5 --lr 3e-3 --eval-every 20 --eval-batches 4 --log-every 10
       --seed 5 --checks all)
val_lines() { grep '^== step' "$1" | sed -e 's/ (eval.*//'; }
. "$(dirname "$0")/checkpoint_state.sh"
final_ckpt() { ls "$1"/ckpt-*.safetensors | sort -V | tail -1; }
# verify DIR N: fjit_verify rebuilds the run from DIR's checkpoints and finds N intervals identical.
verify() {
  "$(dirname "$bin")/fjit_verify" "$1" > "$1.verify" 2>&1 ||
    { cat "$1.verify"; fail "fjit_verify $1 failed"; return; }
  grep -q "^$2 interval(s) checked, 0 diverged" "$1.verify" || { cat "$1.verify"; fail "fjit_verify $1: not $2 intervals"; }
}

"$bin" "${small[@]}" --replicas 2 --checkpoint-dir "$work/full" > "$work/threads.out" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$work/threads.out"; fail "thread run exited $rc"; }
grep -q 'checks_raised=0' "$work/threads.out" || fail "a check was raised"
[ "$(val_lines "$work/threads.out" | wc -l)" -eq 2 ] || fail "not 2 validation lines"
first=$(val_lines "$work/threads.out" | head -1 | sed -e 's/.*validation \([0-9.]*\).*/\1/')
last=$(val_lines "$work/threads.out" | tail -1 | sed -e 's/.*validation \([0-9.]*\).*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a && a < 8.5) }' ||
  fail "the validation loss did not fall ($first -> $last bits/byte)"

if [ "$mode" = threads ]; then
  # Cut at step 20, then resume: the same final checkpoint as the uninterrupted run.
  "$bin" "${small[@]}" --replicas 2 --checkpoint-dir "$work/cut" --max-steps 20 > "$work/cut.out" 2>&1 ||
    { cat "$work/cut.out"; fail "the cut run failed"; }
  "$bin" "${small[@]}" --replicas 2 --checkpoint-dir "$work/cut" --resume > "$work/resumed.out" 2>&1 ||
    { cat "$work/resumed.out"; fail "the resumed run failed"; }
  grep -q 'resumed from .*ckpt-20' "$work/resumed.out" || fail "the run did not resume from step 20"
  verify "$work/cut" 1
  same_state "$(final_ckpt "$work/full")" "$(final_ckpt "$work/cut")" ||
    fail "the resumed run's final checkpoint differs from the uninterrupted run's"

  # Killed (SIGKILL) once a checkpoint is on disk, then resumed: the same final checkpoint as a
  # run never killed. (Should the run end before the kill lands, the comparison still holds.)
  long=("${small[@]}" --steps 400 --eval-every 0 --checkpoint-every 10)
  "$bin" "${long[@]}" --checkpoint-dir "$work/whole" > "$work/whole.out" 2>&1 || fail "the long run failed"
  "$bin" "${long[@]}" --checkpoint-dir "$work/killed" > "$work/killed.out" 2>&1 &
  pid=$!
  for _ in $(seq 1 400); do
    [ -e "$work/killed/ckpt-30.safetensors" ] && break
    sleep 0.02
  done
  kill -9 $pid 2> /dev/null
  wait $pid 2> /dev/null
  "$bin" "${long[@]}" --checkpoint-dir "$work/killed" --resume > "$work/after_kill.out" 2>&1 ||
    { cat "$work/after_kill.out"; fail "the run resumed after a kill failed"; }
  same_state "$(final_ckpt "$work/whole")" "$(final_ckpt "$work/killed")" ||
    fail "the run resumed after a kill ends with another checkpoint than the run never killed"

  "$bin" "${small[@]}" --checkpoint-dir "$work/full" --generate "The " --tokens 24 \
    > "$work/gen.out" 2> "$work/gen.err" || { cat "$work/gen.out" "$work/gen.err"; fail "generation failed"; }
  grep -q '^The ' "$work/gen.out" || fail "the sample does not start with the prompt"
  grep -q '24 new tokens' "$work/gen.err" || { cat "$work/gen.err"; fail "not 24 new tokens"; }
  grep -q '| 1 compiled step(s)' "$work/gen.err" || fail "generation compiled more than one step"

  # Bad corpora: each error names the file.
  : > "$work/empty.txt"
  printf 'some text\000 and a NUL byte\n' > "$work/binary.txt"
  printf 'too short\n' > "$work/short.txt"
  for bad in empty binary short; do
    "$bin" "${small[@]}" --corpus "$work/$bad.txt" --token-file "$work/$bad.tokens" > "$work/$bad.out" 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "the $bad corpus exited $rc, not 1"
    grep -q "$bad\.t" "$work/$bad.out" || { cat "$work/$bad.out"; fail "the $bad corpus's error names no file"; }
  done
  # Output paths are checked before any work: a --checkpoint-dir or --export-hf under a regular
  # file fails at start-up (exit 1) naming the option and the file in the way.
  : > "$work/plain"
  for opt in --checkpoint-dir --export-hf; do
    "$bin" "${small[@]}" --replicas 2 $opt "$work/plain/out" > "$work/badpath.out" 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "$opt under a regular file exited $rc, not 1"
    grep -qF -- "$opt $work/plain/out: $work/plain is a regular file" "$work/badpath.out" ||
      { cat "$work/badpath.out"; fail "$opt under a regular file: no clear error"; }
    ! grep -q '^fjit train_lm:' "$work/badpath.out" || fail "$opt under a regular file: the run started"
  done
fi

if [ "$mode" = mpi ]; then
  "$@" "$bin" "${small[@]}" --checkpoint-dir "$work/mpi" --checkpoint-every 20 > "$work/mpi.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$work/mpi.out"; fail "mpi run exited $rc"; }
  grep -q 'replica(s) (MPI ranks)' "$work/mpi.out" || fail "the MPI run did not use MPI ranks"
  diff <(val_lines "$work/threads.out") <(val_lines "$work/mpi.out") ||
    fail "MPI ranks and thread replicas trained differently"
  same_state "$(final_ckpt "$work/full")" "$(final_ckpt "$work/mpi")" ||
    fail "the MPI run's final checkpoint differs from the thread run's"
  verify "$work/mpi" 1
  # ZeRO stage 3 (parameters sharded over the ranks): gathers that every rank must join (the
  # parameter count, validation, checkpoints, the export) must not hang, and the run is the
  # replicated run bit for bit.
  timeout 300 "$@" "$bin" "${small[@]}" --zero 3 --checkpoint-dir "$work/zero3" --export-hf "$work/zero3_hf" \
    > "$work/zero3.out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$work/zero3.out"; fail "the ZeRO stage 3 MPI run exited $rc"; }
  diff <(val_lines "$work/threads.out") <(val_lines "$work/zero3.out") ||
    fail "ZeRO stage 3 on MPI ranks trained differently from the replicated thread run"
  same_state "$(final_ckpt "$work/full")" "$(final_ckpt "$work/zero3")" ||
    fail "the ZeRO stage 3 run's final checkpoint differs from the replicated run's"
  [ -s "$work/zero3_hf/model.safetensors" ] || fail "the ZeRO stage 3 run exported no model"
fi
[ $failures -eq 0 ] && echo "train_lm_test $mode: ok"
exit $((failures > 0))
