#!/usr/bin/env bash
# The bf16 policy's accuracy against f32 (issue 29, item 4): the main jobs trained the same way
# twice, once with --compute-dtype f32 and once with bf16, on one replica:
#   - the CNN on Fashion-MNIST, one epoch from each of three seeds (one epoch's accuracy moves by
#     a few tenths of a point with the seed alone): the mean final test accuracy, target within
#     0.3 points of f32;
#   - the language model on the fortunes corpus, 150 steps: validation bits/byte, target
#     within 1% of f32.
# Prints each run's output, then one "RESULT " line per job for bench/run_all.sh's summary.
#
#   bash bench/bf16_accuracy.sh [BUILD_DIR]     (BUILD_DIR defaults to build)
#   FJIT_BF16_LM_STEPS=N ...                    LM steps per run (150)
#   FJIT_BF16_CNN_SEEDS="0 1 2" ...             the CNN's seeds
#
# Exits 1 when a run fails or prints no figure; a missed target is reported, not an error.
set -uo pipefail
BUILD=${1:-build}
EX=$BUILD/examples
LM_STEPS=${FJIT_BF16_LM_STEPS:-150}
SEEDS=${FJIT_BF16_CNN_SEEDS:-0 1 2}
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_bf16acc.XXXXXX")
trap 'rm -rf "$work"' EXIT

declare -A acc secs bpb
for dt in f32 bf16; do
  start=$(date +%s)
  acc[$dt]=
  for seed in $SEEDS; do
    out=$work/cnn_${dt}_$seed.out
    "$EX/train_cnn" --replicas 1 --epochs 1 --seed "$seed" --compute-dtype "$dt" 2>&1 | tee "$out" || exit 1
    a=$(sed -n -e 's/^final test accuracy: \([0-9.]*\)%.*/\1/p' "$out" | tail -1)
    [ -n "$a" ] || { echo "bf16_accuracy: no test accuracy from train_cnn --seed $seed --compute-dtype $dt"; exit 1; }
    acc[$dt]="${acc[$dt]:+${acc[$dt]} }$a"
  done
  secs[cnn_$dt]=$(($(date +%s) - start))
done
for dt in f32 bf16; do
  start=$(date +%s)
  "$EX/train_lm" --replicas 1 --steps "$LM_STEPS" --eval-every "$LM_STEPS" --compute-dtype "$dt" \
    --token-file "$work/corpus.tokens" 2>&1 | tee "$work/lm_$dt.out" || exit 1
  secs[lm_$dt]=$(($(date +%s) - start))
  bpb[$dt]=$(sed -n -e 's/.*validation \([0-9.]*\) bits\/byte.*/\1/p' "$work/lm_$dt.out" | tail -1)
  [ -n "${bpb[$dt]}" ] || { echo "bf16_accuracy: no validation loss from train_lm --compute-dtype $dt"; exit 1; }
done

awk -v f="${acc[f32]}" -v b="${acc[bf16]}" -v fs="${secs[cnn_f32]}" -v bs="${secs[cnn_bf16]}" 'BEGIN {
  n = split(f, F, " "); split(b, B, " "); mf = mb = 0
  for (i = 1; i <= n; i++) { mf += F[i] / n; mb += B[i] / n }
  d = mb - mf; met = (d >= -0.3) ? "met" : "missed"
  printf "RESULT bf16 accuracy, CNN Fashion-MNIST 1 epoch, mean test accuracy over %d seeds, f32 / bf16 | %.2f%% (%s; %d s) / %.2f%% (%s; %d s), %+.2f points | within 0.3 points of f32: %s\n", n, mf, f, fs, mb, b, bs, d, met }'
awk -v f="${bpb[f32]}" -v b="${bpb[bf16]}" -v fs="${secs[lm_f32]}" -v bs="${secs[lm_bf16]}" -v n="$LM_STEPS" 'BEGIN {
  r = 100 * (b - f) / f; met = (r <= 1) ? "met" : "missed"
  printf "RESULT bf16 accuracy, LM fortunes %d steps, validation bits/byte f32 / bf16 | %.4f (%d s) / %.4f (%d s), %+.2f%% | within 1%% of f32: %s\n", n, f, fs, b, bs, r, met }'
