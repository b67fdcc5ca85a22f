#!/usr/bin/env bash
# The fpe check mode's false-alarm sweep over the main jobs (checks/fpe_report.h): the MLP,
# CNN and ViT jobs on the committed 16-example Fashion-MNIST fixture and the language model on
# the tiny corpus, each trained a few steps with 2 thread replicas under `--checks fpe
# --on-check-failure throw`: every run exits 0 and raises no check.
# usage: fpe_jobs_test.sh MLP_BIN CNN_BIN VIT_BIN LM_BIN FIXTURE_DIR CORPUS
set -uo pipefail
mlp=$1 cnn=$2 vit=$3 lm=$4 fixture=$5 corpus=$6
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_fpe_jobs.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

data=$work/data
. "$(dirname "$0")/fixture_data.sh"
fixture_data "$fixture" "$data"
fpe=(--checks fpe --on-check-failure throw --replicas 2)
images=(--data-dir "$data" --epochs 2 --batch-size 8 --log-every 0 --seed 3 --warmup-steps 0)

run() {
  local name=$1
  shift
  "$@" > "$work/$name.out" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { cat "$work/$name.out"; fail "$name exited $rc"; return; }
  grep -q 'checks_raised=0' "$work/$name.out" || { cat "$work/$name.out"; fail "$name raised a check"; }
}
run mlp "$mlp" "${images[@]}" "${fpe[@]}"
run cnn "$cnn" "${images[@]}" "${fpe[@]}"
run vit "$vit" "${images[@]}" "${fpe[@]}"
run lm "$lm" --corpus "$corpus" --layers 2 --dim 64 --heads 2 --context 32 --batch-size 8 --steps 10 \
  --warmup-steps 2 --lr 3e-3 --eval-every 0 --log-every 5 "${fpe[@]}"

[ $failures -eq 0 ] && echo "PASS: no false alarm in the fpe mode on the MLP, CNN, ViT and LM jobs"
exit $((failures > 0))
