// The language model's data-parallel training step and validation loss (pmap'd over "batch").
//
// Training step, one pmap'd function of (params, AdamW state, inputs, targets, step):
//   check: every input and target token id is in [0, vocab) (the report names the first bad
//     position of this replica's shard: row and column);
//   value_and_grad of the mean next-token cross entropy on this replica's shard;
//   check: the local loss is finite (the report names the replica whose data was bad);
//   pmean of the gradients (one fused all-reduce) and of the loss;
//   check: the global gradient norm is finite and below max_grad_norm;
//   clipping to clip_grad_norm, then AdamW at schedule(step) (step: an i32 scalar every
//   replica gets whole, so the rate changes without recompiling).
// Returns {params', state', mean loss, gradient norm before clipping}.
// With scaling.on (parallel/train/loss_scaling.h) the loss is multiplied by the loss scale, an
// f32 scalar argument every replica gets whole, before value_and_grad, and the gradients are
// averaged (in f16 with grad_dtype f16), unscaled and checked for overflow before clipping; the
// loss returned is the unscaled one. Off, the scale is not read.
//
// With frozen parameters (LmSplitStepFn: trainable, frozen, state, inputs, targets, step), the
// decoder reads both dicts, but value_and_grad, the all-reduce, the norm, clipping and AdamW
// cover the trainable entries alone: the plan computes no gradient a trainable one does not
// need, the optimizer state holds trainable names only, and the frozen dict is read, never
// written or returned. LmStepFn is the same step with every parameter trainable.
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "core/lib/optimizers.h"
#include "core/lib/param_groups.h"
#include "core/lib/schedules.h"
#include "core/nn/decoder.h"
#include "parallel/pmap.h"
#include "parallel/train/loss_scaling.h"
#include "parallel/train/zero.h"

namespace fjit::lm {

struct LmStepFn {
  DecoderConfig model;
  AdamW optimizer;
  Schedule schedule = Schedule::constant(1e-3);
  double clip_grad_norm = 1.0;  // 0: none
  double max_grad_norm = 1e4;
  std::string axis = "batch";
  // Per-group learning-rate scale and weight decay (core/lib/param_groups.h); the patterns are
  // checked against the trainable and frozen names. Empty: AdamW's settings for every one.
  std::vector<ParamGroup> groups;
  training::GradScaling scaling;
  DType compute_dtype = DType::f32;  // the layers' policy while tracing (core/nn/precision.h)
  // ZeRO stage (parallel/train/zero.h): 0 the optimizer state replicated; 1 sharded over
  // `axis` (the state argument holds this replica's shards, from zero_init_state of the
  // trainable parameters, passed as a sharded dict), the parameters bit-identical to stage 0's;
  // 2 also the gradients reduce-scattered; 3 also the trainable parameters sharded: that
  // argument and output hold this replica's shards (zero_shard_params, a sharded dict; the
  // frozen ones stay whole), all-gathered whole at the step's start, and zero3_shapes must list
  // them (zero_param_shapes). Clipping and groups at stages 2 and 3: training::ZeroClip, the
  // replicated step's bits. Stages 2 and 3 refuse loss scaling (make_lm_step,
  // make_lm_split_step throw std::invalid_argument).
  int zero_stage = 0;
  std::vector<training::ZeroParamShape> zero3_shapes;
  // The step without a loss scale (scaling must be off).
  std::tuple<TensorDict, TensorDict, Tensor, Tensor> operator()(
      const Params& params, const Params& state, const Tensor& inputs, const Tensor& targets,
      const Tensor& step) const;
  // The step over `trainable`, the decoder reading `frozen` too (disjoint names), at
  // `loss_scale` (read only with scaling.on; undefined then is a TraceError).
  std::tuple<TensorDict, TensorDict, Tensor, Tensor> train(
      const Params& trainable, const Params& frozen, const Params& state, const Tensor& inputs,
      const Tensor& targets, const Tensor& step, const Tensor& loss_scale = Tensor()) const;
};
using LmStep = Pmapped<LmStepFn>;
using LmStepOut = std::tuple<ArrayDict, ArrayDict, Array, Array>;

// LmStepFn::train as a pmap'd function: (trainable, frozen, state, inputs, targets, step,
// loss scale) -> {trainable', state', mean loss, gradient norm before clipping}.
struct LmSplitStepFn {
  LmStepFn step;
  std::tuple<TensorDict, TensorDict, Tensor, Tensor> operator()(
      const Params& trainable, const Params& frozen, const Params& state, const Tensor& inputs,
      const Tensor& targets, const Tensor& step_number, const Tensor& loss_scale) const {
    return step.train(trainable, frozen, state, inputs, targets, step_number, loss_scale);
  }
};
using LmSplitStep = Pmapped<LmSplitStepFn>;

// Sum of the next-token cross entropy (nats) over every replica's shard: an f32 scalar.
struct LmLossSumFn {
  DecoderConfig model;
  std::string axis = "batch";
  DType compute_dtype = DType::f32;
  Tensor operator()(const Params& params, const Tensor& inputs, const Tensor& targets) const;
};
using LmEval = Pmapped<LmLossSumFn>;

// The token-id check of the step, usable on its own: ids i32 [rows, T] in [0, vocab).
void check_token_ids(const Tensor& ids, int64_t vocab, const char* what);

LmStep make_lm_step(const Mesh& mesh, LmStepFn fn, PmapOptions options);
LmSplitStep make_lm_split_step(const Mesh& mesh, LmStepFn fn, PmapOptions options);
LmEval make_lm_eval(const Mesh& mesh, DecoderConfig model, PmapOptions options,
                    DType compute_dtype = DType::f32);

}  // namespace fjit::lm
