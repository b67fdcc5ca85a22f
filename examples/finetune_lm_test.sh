#!/usr/bin/env bash
# Smoke runs of the fine-tuning job (finetune_lm; registered with CTest by
# examples/CMakeLists.txt) on a fixture model the test writes: train_lm pretrains a small
# decoder on the committed text fixture and exports it in Hugging Face's layout (--export-hf).
#   threads  from that export, 2 thread replicas, checks all: LoRA (rank 4) ends below the base
#            model's validation loss, raises no check, writes a checkpoint holding the adapters
#            and their state alone, a merged export and a PEFT adapter; the merged export, loaded
#            again (--max-steps 0), gives the LoRA run's final validation loss; a LoRA run cut at
#            half its steps and resumed (the base re-read from --init-from) ends with the
#            uninterrupted run's checkpoint; full fine-tuning (--lora-rank 0) lowers the loss
#            and exports; a Llama (--arch llama, grouped-query attention) pretrained, exported,
#            fine-tuned with LoRA, its merged export reloaded (the same validation loss).
#   mpi      the LoRA run under `MPIEXEC -n 2`: the thread run's validation lines and final
#            checkpoint state (checkpoint_state.sh).
# usage: finetune_lm_test.sh threads|mpi TRAIN_LM FINETUNE_LM CORPUS [MPIEXEC -n 2 FLAGS...]
set -uo pipefail
mode=$1 train_lm=$2 bin=$3 corpus=$4
shift 4
work=$(mktemp -d "${TMPDIR:-/tmp}/fjit_finetune_lm.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
val_lines() { grep '^== step' "$1" | sed -e 's/ (eval.*//'; }
final_val() { sed -n -e 's/^final validation: \([0-9.]*\).*/\1/p' "$1"; }
. "$(dirname "$0")/checkpoint_state.sh"
final_ckpt() { ls "$1"/ckpt-*.safetensors | sort -V | tail -1; }
# run NAME CMD...: the command's output in $work/NAME.out; a failure is reported with it.
run() {
  local name=$1
  shift
  "$@" > "$work/$name.out" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { cat "$work/$name.out"; fail "$name exited $rc"; }
}

data=(--corpus "$corpus" --token-file "$work/corpus.tokens" --batch-size 8 --eval-batches 4
      --log-every 10 --seed 5 --checks all)
run pretrain "$train_lm" "${data[@]}" --layers 2 --dim 64 --heads 2 --context 32 --steps 30 \
  --warmup-steps 5 --lr 3e-3 --eval-every 0 --replicas 2 --export-hf "$work/base"
for f in config.json model.safetensors; do
  [ -s "$work/base/$f" ] || fail "train_lm --export-hf wrote no $f"
done

tune=("${data[@]}" --init-from "$work/base" --steps 20 --warmup-steps 2 --lr 1e-2 --eval-every 10)
lora=("${tune[@]}" --lora-rank 4 --lora-alpha 8)

if [ "$mode" = threads ]; then
  run base "$bin" "${tune[@]}" --lora-rank 0 --max-steps 0
  base=$(final_val "$work/base.out")
  [ -n "$base" ] || fail "the base model's validation loss was not printed"
  run lora "$bin" "${lora[@]}" --replicas 2 --checkpoint-dir "$work/lora" \
    --export-hf "$work/merged" --export-peft "$work/peft"
  grep -q 'checks_raised=0' "$work/lora.out" || fail "the LoRA run raised a check"
  grep -q 'LoRA r 4 alpha 8' "$work/lora.out" || fail "the LoRA run does not say its adapters"
  tuned=$(final_val "$work/lora.out")
  awk -v a="$base" -v b="$tuned" 'BEGIN { exit !(b < a) }' ||
    fail "LoRA did not lower the validation loss ($base -> $tuned bits/token)"
  for f in merged/config.json merged/model.safetensors peft/adapter_config.json peft/adapter_model.safetensors; do
    [ -s "$work/$f" ] || fail "no $f exported"
  done
  # The checkpoint holds the adapters and their optimizer state, not the frozen base.
  header=$(head -c 65536 "$(final_ckpt "$work/lora")" | tr -c '[:print:]' ' ')
  grep -q '"params/block0/attn/qkv/lora_a"' <<< "$header" || fail "the checkpoint lacks the adapters"
  grep -q '"opt/' <<< "$header" || fail "the checkpoint lacks the optimizer state"
  grep -q '"params/block0/attn/qkv/w"' <<< "$header" && fail "the checkpoint holds frozen weights"
  grep -q 'lora_scale' <<< "$header" && fail "the checkpoint holds the adapters' frozen scales"

  # The merged export computes what the adapted model did.
  run reload "$bin" "${tune[@]}" --init-from "$work/merged" --lora-rank 0 --max-steps 0
  again=$(final_val "$work/reload.out")
  awk -v a="$tuned" -v b="$again" 'BEGIN { d = a - b; exit !(b != "" && d < 2e-4 && d > -2e-4) }' ||
    fail "the merged export's validation loss $again is not the LoRA run's $tuned"

  # Cut at step 10 and resumed: the frozen base comes from --init-from again.
  run cut "$bin" "${lora[@]}" --replicas 2 --checkpoint-dir "$work/cut" --max-steps 10
  run resumed "$bin" "${lora[@]}" --replicas 2 --checkpoint-dir "$work/cut" --resume
  grep -q 'resumed from .*ckpt-10' "$work/resumed.out" || fail "the run did not resume from step 10"
  same_state "$(final_ckpt "$work/lora")" "$(final_ckpt "$work/cut")" ||
    fail "the resumed LoRA run's final checkpoint differs from the uninterrupted run's"
  # Another base is refused on resume.
  "$bin" "${lora[@]}" --init-from "$work/merged" --replicas 2 --checkpoint-dir "$work/cut" --resume \
    > "$work/other_base.out" 2>&1 && fail "a resume from another --init-from was accepted"
  grep -q 'init' "$work/other_base.out" || { cat "$work/other_base.out"; fail "the refusal does not name the init"; }

  run full "$bin" "${tune[@]}" --lora-rank 0 --replicas 2 --export-hf "$work/full"
  full=$(final_val "$work/full.out")
  awk -v a="$base" -v b="$full" 'BEGIN { exit !(b < a) }' ||
    fail "full fine-tuning did not lower the validation loss ($base -> $full bits/token)"
  [ -s "$work/full/model.safetensors" ] || fail "full fine-tuning exported nothing"

  # A Llama (rotary, RMS norm, SwiGLU, grouped-query attention, untied head): pretrained,
  # exported, LoRA on every linear layer of its blocks, and the merged export computes it.
  run llama_pre "$train_lm" "${data[@]}" --arch llama --kv-heads 1 --layers 2 --dim 32 --heads 2 \
    --context 32 --steps 10 --warmup-steps 2 --lr 3e-3 --eval-every 0 --export-hf "$work/llama"
  grep -q 'exported llama (Llama)' "$work/llama_pre.out" || fail "train_lm --arch llama did not export a Llama"
  run llama_lora "$bin" "${data[@]}" --init-from "$work/llama" --steps 6 --warmup-steps 1 --lr 1e-2 \
    --eval-every 0 --lora-rank 2 --replicas 2 --export-hf "$work/llama_tuned"
  grep -q '10 layers adapted' "$work/llama_lora.out" || fail "LoRA did not adapt the Llama's 10 linear layers"
  run llama_reload "$bin" "${data[@]}" --init-from "$work/llama_tuned" --lora-rank 0 --max-steps 0
  awk -v a="$(final_val "$work/llama_lora.out")" -v b="$(final_val "$work/llama_reload.out")" \
    'BEGIN { d = a - b; exit !(b != "" && d < 2e-4 && d > -2e-4) }' ||
    fail "the Llama's merged export does not compute the LoRA run's validation loss"

  # Bad command lines.
  "$bin" "${data[@]}" > "$work/no_init.out" 2>&1
  [ $? -eq 2 ] && grep -q 'init-from' "$work/no_init.out" || fail "a missing --init-from is not a usage error"
  "$bin" "${tune[@]}" --init-from "$work/nowhere" > "$work/bad_init.out" 2>&1
  [ $? -eq 1 ] && grep -q 'nowhere' "$work/bad_init.out" || fail "a missing model directory is not named"
fi

if [ "$mode" = mpi ]; then
  run lora_threads "$bin" "${lora[@]}" --replicas 2 --checkpoint-dir "$work/threads"
  run lora_mpi "$@" "$bin" "${lora[@]}" --checkpoint-dir "$work/mpi" --export-peft "$work/peft"
  grep -q 'replica(s) (MPI ranks)' "$work/lora_mpi.out" || fail "the MPI run did not use MPI ranks"
  diff <(val_lines "$work/lora_threads.out") <(val_lines "$work/lora_mpi.out") ||
    fail "MPI ranks and thread replicas fine-tuned differently"
  same_state "$(final_ckpt "$work/threads")" "$(final_ckpt "$work/mpi")" ||
    fail "the MPI run's final checkpoint differs from the thread run's"
  [ -s "$work/peft/adapter_model.safetensors" ] || fail "the MPI run exported no adapter"
fi
[ $failures -eq 0 ] && echo "finetune_lm_test $mode: ok"
exit $((failures > 0))
