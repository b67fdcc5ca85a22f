// LmTrainer: the training loop of a decoder language model (core/nn/decoder.h) on a token file
// (core/io/token_file.h) — parameters and AdamW state, the pmap'd step (parallel/lm/lm_step.h),
// validation loss in bits per byte, progress lines with tokens/s, safetensors checkpoints.
//
// Promises:
//  - The corpus is tokenized (bytes) into a token file once, by the primary replica, before any
//    process reads it; every process then maps it and reads only its rows of each global batch
//    (the file must be visible to every process: one host, or a shared file system).
//  - Parameters start from the seed (decoder_params), or, for a fine-tuning run, from the dict
//    the caller gives (options.model must then be the decoder that reads it; options.init_from
//    names its source in the checkpoints). A resumed fine-tuning run is given the same dict
//    again: the frozen parameters come from it, the trained ones and their state from the
//    checkpoint.
//  - Deterministic: parameters from the seed (or the given dict), the batch order from (seed, epoch), the same
//    compiled plan each step, so two runs with the same options give bit-identical parameters,
//    with threads or MPI ranks.
//  - With options.trainable, only the parameters those patterns select are trained; the others
//    are frozen (lm_step.h) and a checkpoint holds the trained ones alone.
//  - A checkpoint holds params ("params/<name>"), AdamW state ("opt/<name>"), the data position
//    and the run's configuration; a run resumed from it sees exactly the batches, and computes
//    exactly the parameters, of the uninterrupted run. A checkpoint of another configuration is
//    refused with the differences listed, unless allow_config_change.
//  - With loss scaling (options.grad_dtype f16 or options.loss_scale) the scale is an input of
//    each step and moves by DynamicLossScale (core/lib/loss_scale.h) after it: a step whose
//    loss_scale_overflow check raised is skipped (the skip_step policy, the default then) and
//    backs the scale off. The scale is in checkpoints, so a resumed run is exact.
//  - Resuming requires the checkpoint's whole-file checksum and the same model (both named
//    otherwise), and cross-checks the header against the state: data position = step, opt/step
//    = step - skipped steps. The constructor checks every output path (checkpoint_dir, the
//    token file, export_hf, FJIT_TIMELINE, ...) before it writes anything.
//  - With options.zero_stage 1, 2 or 3 (ZeRO, parallel/train/zero.h), optimizer_state() holds
//    this process's replicas' shards of the state (at stage 3 local_trainable_params() those
//    of the trained parameters too) and the parameters are bit-identical to the replicated
//    run's. Its checkpoints hold the whole state (zero_gather_state), the file the
//    replicated run writes; load reshards it for this run's replica count (zero_shard_state),
//    so a run resumes at another replica count, with or without ZeRO. The step's divergence
//    check (FJIT_DIVERGENCE_CHECK_EVERY) is off then: the replicas' shards differ.
//  - Every replica runs the same calls (evaluate() and save() included: they run collectives).
//  - Certified runs (as the classifier trainer's, parallel/train/verify.h): every checkpoint
//    carries the hash chain of core/io/state_hash.h (its state hash, chained to the previous
//    checkpoint's; a run's first to kChainStart, a resumed run's to the one it resumed from),
//    checked at load, and the step records (loss and gradient norm bits) of the steps since
//    the previous checkpoint, with the replica count, so lm::verify_lm_interval
//    (parallel/lm/lm_verify.h) can re-execute an interval and compare; and the program's
//    command line (options.command_line, when set: train_lm sets it), from which
//    lm::lm_trainer_factory_of rebuilds the run for fjit_verify.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/io/progress.h"
#include "core/io/token_batches.h"
#include "core/io/token_file.h"
#include "parallel/lm/lm_options.h"
#include "parallel/lm/lm_step.h"
#include "parallel/mesh.h"

namespace fjit::lm {

// The token file a run uses: options.token_file, else <checkpoint_dir>/corpus.tokens, else one
// in the temporary directory named after the corpus path.
std::string token_file_path(const LmOptions& o);

// The "format" a checkpoint of LmTrainer records (the classifier trainer's differs): what
// fjit_verify dispatches on.
inline constexpr const char* kLmCheckpointFormat = "fjit-decoder-lm-v1";

class LmTrainer {
 public:
  // Writes the token file (primary) and opens it (every process). Throws std::runtime_error
  // naming the file for a bad corpus (empty, not text, shorter than one batch).
  // `initial` empty: the parameters of options.model from options.seed, the vocabulary the
  // byte tokenizer's. Else every parameter options.model reads (names and shapes checked;
  // extra entries such as LoRA adapters are kept), in any dtype the decoder reads; the token
  // file's vocabulary must then fit options.model.vocab (std::invalid_argument).
  LmTrainer(Mesh mesh, LmOptions options, ArrayDict initial = {});

  // One step on the next global batch; nullopt once the run is over.
  std::optional<StepStats> step();
  bool done() const;
  // Mean validation loss in bits per token (= bits per byte for the byte tokenizer) over
  // eval_batches global batches of the validation split.
  double validation_bits_per_byte();

  void save(const std::string& path);
  void load(const std::string& path);
  // The whole run: resume (options.resume), progress lines, validation every eval_every steps
  // and at the end, checkpoints. Returns the final validation bits per byte.
  double run();

  // Every parameter, trained and frozen, in the decoder's order (at ZeRO stage 3 gathered
  // whole: every process must call it).
  ArrayDict params() const;
  // The trained parameters, whole (at ZeRO stage 3 gathered from the shards: every process
  // must call it).
  ArrayDict trainable_params() const;
  // What the step holds of the trained parameters: trainable_params(), or at ZeRO stage 3 this
  // process's replicas' shards (zero_shard_params's layout).
  const ArrayDict& local_trainable_params() const { return std::get<0>(buffers_[current_]); }
  const ArrayDict& frozen_params() const { return frozen_; }
  const ArrayDict& optimizer_state() const { return std::get<1>(buffers_[current_]); }
  int64_t steps_done() const { return steps_done_; }
  int64_t steps_this_run() const { return steps_done_ - run_started_at_; }
  int64_t total_steps() const;
  const io::TokenFile& tokens() const { return *file_; }
  const LmOptions& options() const { return options_; }
  const Mesh& mesh() const { return mesh_; }
  double last_grad_norm() const { return last_grad_norm_; }
  // What each step since the last checkpoint saved or loaded reported (training::step_record).
  const std::vector<std::string>& step_records() const { return step_records_; }
  // The loss scale's policy; null when the run does not scale its loss.
  DynamicLossScale* loss_scale() { return scaler_ ? &*scaler_ : nullptr; }

 private:
  PmapOptions pmap_options(const char* name) const;
  Progress make_progress() const;

  Mesh mesh_;
  LmOptions options_;
  std::unique_ptr<io::TokenFile> file_;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  std::unique_ptr<io::TokenBatches> train_batches_;
  Schedule schedule_;
  LmSplitStep step_fn_;
  LmEval eval_fn_;
  std::vector<std::string> names_;  // every parameter's, in order
  std::vector<training::ZeroParamShape> zero3_shapes_;  // the trained parameters' at ZeRO stage 3
  ArrayDict frozen_;
  LmStepOut buffers_[2];  // step k reads buffers_[current_] (trainable, state) and writes the other
  int current_ = 0;
  bool buffers_conformed_ = false;
  Array inputs_, targets_, step_;
  Array scale_;  // f32 scalar argument of the step: the loss scale (1: none)
  std::optional<DynamicLossScale> scaler_;
  int64_t steps_done_ = 0;
  int64_t skipped_steps_ = 0;  // of steps_done_, those a check skipped (no update)
  int64_t run_started_at_ = 0;
  double last_grad_norm_ = 0;
  std::string chain_;  // the hash chain's value at the last checkpoint saved or loaded
  std::vector<std::string> step_records_;
};

}  // namespace fjit::lm
