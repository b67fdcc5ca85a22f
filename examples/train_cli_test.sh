#!/usr/bin/env bash
# The train_fashion_mnist program as a user runs it (registered with CTest by
# examples/CMakeLists.txt), on the committed 16-example fixture posing as both splits:
#   threads      2 thread replicas: exit 0, the epoch loss falls, a final accuracy is printed;
#                a run stopped by --max-steps and continued with --resume writes a final
#                checkpoint with the same state (SHA-256) as the uninterrupted run's; bad data files and bad
#                options fail with exit 1 / 2 and a message naming the file and what was
#                expected.
#   mpi          the same small run under `MPIEXEC -n 2`: its epoch lines equal the thread run's;
#                a run resumed under MPI where only rank 0 sees the checkpoint ends with the
#                same final checkpoint as the uninterrupted thread run.
# usage: train_cli_test.sh threads|mpi TRAIN_BINARY FIXTURE_DIR [MPIEXEC -n 2 FLAGS...]
set -uo pipefail
mode=$1 bin=$2 fixture=$3
shift 3
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_cli_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

data=$work/data
. "$(dirname "$0")/fixture_data.sh"
. "$(dirname "$0")/checkpoint_state.sh"
fixture_data "$fixture" "$data"
small=(--data-dir "$data" --epochs 3 --batch-size 8 --log-every 0 --seed 5)

# Prints the run's epoch lines without their timings.
epoch_lines() { grep '^== epoch' "$1" | sed -e 's/ (eval.*//'; }

if [ "$mode" = mpi ]; then
  "$bin" "${small[@]}" --replicas 2 > "$work/threads.out" 2>&1 || fail "thread run exited $?"
  "$@" "$bin" "${small[@]}" > "$work/mpi.out" 2>&1 || { rc=$?; cat "$work/mpi.out"; fail "mpi run exited $rc"; }
  grep -q 'replica(s) (MPI ranks)' "$work/mpi.out" || fail "the MPI run did not use MPI ranks"
  [ "$(epoch_lines "$work/mpi.out" | wc -l)" -eq 3 ] || fail "the MPI run printed no 3 epoch lines"
  diff <(epoch_lines "$work/threads.out") <(epoch_lines "$work/mpi.out") ||
    fail "MPI ranks and thread replicas trained differently"
  # Resume under MPI when only rank 0 sees the checkpoint (rank 1 is pointed at an empty
  # directory, as on a machine without a shared file system): rank 0 broadcasts what it loaded,
  # and the final checkpoint equals the uninterrupted thread run's byte for byte.
  "$bin" "${small[@]}" --replicas 2 --checkpoint-dir "$work/full" > /dev/null 2>&1 || fail "thread run exited $?"
  "$@" "$bin" "${small[@]}" --checkpoint-dir "$work/split" --max-steps 3 > "$work/first.out" 2>&1 ||
    { rc=$?; cat "$work/first.out"; fail "first half under MPI exited $rc"; }
  launcher=("$1" --allow-run-as-root --oversubscribe --bind-to none)
  "${launcher[@]}" -n 1 "$bin" "${small[@]}" --checkpoint-dir "$work/split" --resume \
    : -n 1 "$bin" "${small[@]}" --checkpoint-dir "$work/nowhere" --resume > "$work/second.out" 2>&1 ||
    { rc=$?; cat "$work/second.out"; fail "resumed MPI run exited $rc"; }
  grep -q 'resumed from .*ckpt-3.safetensors' "$work/second.out" || fail "the MPI run did not resume from step 3"
  same_state "$work/full/ckpt-6.safetensors" "$work/split/ckpt-6.safetensors" ||
    fail "the resumed MPI run's final checkpoint differs from the uninterrupted thread run's"
  [ ! -e "$work/nowhere" ] || fail "rank 1 wrote into its checkpoint directory"
  [ "$failures" -eq 0 ] && echo "train_cli_test mpi: OK"
  exit $((failures > 0))
fi

# A run with 2 thread replicas: exits 0, the epoch loss falls, prints the final accuracy.
out=$work/run.out
"$bin" "${small[@]}" --replicas 2 --checkpoint-dir "$work/full" > "$out" 2>&1 || fail "training exited $?"
grep -q '^final test accuracy: [0-9.]*%$' "$out" || fail "no final test accuracy line"
grep -q 'fjit metrics report' "$out" || fail "no metrics report"
losses=($(grep '^== epoch' "$out" | sed -e 's/.*train loss \([0-9.]*\).*/\1/'))
[ "${#losses[@]}" -eq 3 ] || fail "expected 3 epoch lines, got ${#losses[@]}"
awk -v a="${losses[0]}" -v b="${losses[2]}" 'BEGIN { exit !(b < a) }' ||
  fail "epoch loss did not fall: ${losses[*]}"

# Both spellings of the replica count reach the mesh.
for spelling in "--replicas=2" "--replicas 2"; do
  "$bin" "${small[@]}" --max-steps 1 $spelling > "$work/replicas.out" 2>&1 || fail "$spelling exited $?"
  grep -q '^fjit train_fashion_mnist: 2 replica(s) (threads)' "$work/replicas.out" ||
    fail "$spelling did not give 2 thread replicas: $(head -1 "$work/replicas.out")"
done

# Stopped after 3 of 6 steps (a checkpoint every 2), then resumed: the same final checkpoint.
"$bin" "${small[@]}" --replicas 2 --checkpoint-dir "$work/split" --checkpoint-every 2 --max-steps 3 \
  > "$work/first.out" 2>&1 || fail "first half exited $?"
[ -f "$work/split/ckpt-3.safetensors" ] || fail "no checkpoint at step 3: $(ls "$work/split")"
"$bin" "${small[@]}" --replicas 2 --checkpoint-dir "$work/split" --resume > "$work/second.out" 2>&1 ||
  fail "resumed run exited $?"
same_state "$work/full/ckpt-6.safetensors" "$work/split/ckpt-6.safetensors" ||
  fail "the resumed run's final checkpoint differs from the uninterrupted run's"

# Expects exit code $1 and every other argument as a fixed string in the output.
expect_error() {
  local want=$1 got
  shift
  "$bin" "${small[@]}" "${args[@]}" > "$work/err.out" 2>&1
  got=$?
  [ "$got" -eq "$want" ] || fail "${args[*]}: exit $got, expected $want"
  for text in "$@"; do
    grep -qF -- "$text" "$work/err.out" || fail "${args[*]}: no '$text' in: $(cat "$work/err.out")"
  done
}

args=(--data-dir "$work/absent")
expect_error 1 "$work/absent/train-images-idx3-ubyte.gz: cannot open" "dataset-fashion-mnist"

bad=$work/bad
mkdir -p "$bad" && cp "$data"/* "$bad"/
gzip -dc "$data/train-images-idx3-ubyte.gz" | head -c 5000 > "$bad/train-images-idx3-ubyte"
rm "$bad/train-images-idx3-ubyte.gz"
args=(--data-dir "$bad")
expect_error 1 "$bad/train-images-idx3-ubyte: truncated: header says 16 images of 28x28 (12544 bytes)"

head -c 300 "$data/train-images-idx3-ubyte.gz" > "$bad/train-images-idx3-ubyte.gz"
expect_error 1 "$bad/train-images-idx3-ubyte.gz: truncated" "the gzip stream ends early"

rm "$bad/train-images-idx3-ubyte.gz"
gzip -dc "$data/train-labels-idx1-ubyte.gz" > "$bad/train-images-idx3-ubyte"  # labels posing as images
expect_error 1 "$bad/train-images-idx3-ubyte: bad magic: expected magic 0x00000803 (IDX images"

# Unusable output paths fail before the first step (issue 30): under a regular file, and a
# checkpoint of another model.
: > "$work/plain"
args=(--checkpoint-dir "$work/plain/ckpts")
expect_error 1 "--checkpoint-dir $work/plain/ckpts: $work/plain is a regular file, not a directory"
grep -q '^== epoch' "$work/err.out" && fail "a run with an unusable --checkpoint-dir trained first"
args=(--log-dir "$work/plain/logs")
expect_error 1 "--log-dir $work/plain/logs: $work/plain is a regular file"
args=(--model cnn --checkpoint-dir "$work/full" --resume)
expect_error 1 "$work/full/ckpt-6.safetensors: the checkpoint holds model mlp 784,512,256,10, this run's is cnn dropout 0"
# Another replica count on resume (an elastic restart): refused where the global batch of 8
# does not divide over it, resumed where it does.
args=(--replicas 3 --checkpoint-dir "$work/full" --resume)
expect_error 1 "$work/full/ckpt-6.safetensors: saved by 2 replicas, resumed by 3: the global batch of 8 does not divide over 3 replicas"
mkdir -p "$work/four" && cp "$work/split/ckpt-3.safetensors" "$work/four/"
"$bin" "${small[@]}" --replicas 4 --checkpoint-dir "$work/four" --resume > "$work/four.out" 2>&1 ||
  fail "a 2-replica checkpoint resumed by 4 replicas exited $?"
grep -q 'resumed from .*ckpt-3.safetensors' "$work/four.out" && [ -f "$work/four/ckpt-6.safetensors" ] ||
  fail "4 replicas did not resume from step 3 and reach step 6"

args=(--epochs 0)
expect_error 2 "option --epochs: '0' is not an integer >= 1"
args=(--on-check-failure sometimes)
expect_error 2 "throw, skip_step or log"
args=(--resume)
expect_error 2 "--resume needs --checkpoint-dir"

[ "$failures" -eq 0 ] && echo "train_cli_test threads: OK"
exit $((failures > 0))
