// The data-parallel training step and evaluation of a classifier (parallel/train/model.h:
// the examples' MLP, CNN or ViT among others; softmax cross entropy), which the Trainer runs.
//
// The training step is one pmap'd function of (params, optimizer state, images, labels, step,
// loss scale):
//   value_and_grad of the loss on this replica's shard (a model that uses_key gets its dropout
//   key from the run's seed, the step and the replica: fold_in(fold_in(PRNGKey(seed), step),
//   axis_index)),
//   check: the local loss is finite (so a report names the replica whose data was bad),
//   pmean of the gradients (one fused all-reduce of the whole TensorDict) and of the loss,
//   check: the global norm of the averaged gradient is finite and below a bound,
//   AdamW update with the learning rate of the step's schedule (core/lib/schedules.h),
//   computed inside the step from the step counter, an i32 scalar argument (replicated, not
//   sharded), so it changes every step without recompiling.
// With micro_batches > 1 the gradients of each replica's shard are accumulated over that many
// slices (core/lib/accumulate.h) before the one all-reduce.
// With scaling.on the loss is multiplied by the loss scale (an f32 scalar every replica gets
// whole) before value_and_grad and the gradients are averaged, unscaled and checked by
// parallel/train/loss_scaling.h (in f16 with grad_dtype f16); the loss returned is the unscaled
// one (exact for a power-of-two scale). Off, the scale argument is not read.
// It returns {params', state', mean loss, mean accuracy, gradient norm}. Params and state
// mirror the inputs, so under the skip_step policy a step whose checks fail keeps them.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/io/data.h"
#include "core/lib/optimizers.h"
#include "core/lib/schedules.h"
#include "parallel/pmap.h"
#include "parallel/train/loss_scaling.h"
#include "parallel/train/model.h"
#include "parallel/train/zero.h"

namespace fjit::training {

// Mean softmax cross entropy of the batch, and the logits (for accuracy). Checks (user
// check) that every label is a class of the model.
std::tuple<Tensor, Tensor> model_loss(const Model& model, const Params& p, const Tensor& x,
                                      const Tensor& y, bool training, const Tensor& key);

// The traced training step (see the top of this file). A named type so that the pmap'd step
// has a type callers can hold. optimizer.lr is ignored: schedule(step) is used.
struct TrainStepFn {
  AdamW optimizer;
  Schedule schedule = Schedule::constant(1e-3);
  int micro_batches = 1;
  double max_grad_norm = 1e3;
  std::string axis = "batch";
  Model model;
  uint64_t seed = 0;  // of the dropout keys
  GradScaling scaling;
  DType compute_dtype = DType::f32;  // the layers' policy while tracing (core/nn/precision.h)
  // The silent-data-corruption sentinel (parallel/train/sentinel.h) every K steps; 0: off.
  // Needs equal shards on every replica.
  int64_t sentinel_every = 0;
  // ZeRO stage (parallel/train/zero.h): 0 replicated optimizer state; 1 the state sharded over
  // `axis` (the step's state argument then holds this replica's shards, from zero_init_state,
  // and make_train_step passes it as a sharded dict); 2 also the gradients reduce-scattered
  // (not with loss scaling); 3 also the parameters sharded: the params argument and output hold
  // this replica's shards (zero_shard_params, a sharded dict), all-gathered whole at the
  // step's start (parallel/train/zero.h), gradients reduce-scattered (not with loss scaling;
  // zero3_shapes must then list the parameters).
  int zero_stage = 0;
  std::vector<ZeroParamShape> zero3_shapes;
  std::tuple<TensorDict, TensorDict, Tensor, Tensor, Tensor> operator()(
      const Params& params, const Params& state, const Tensor& x, const Tensor& y,
      const Tensor& step, const Tensor& loss_scale) const;
};
using TrainStep = Pmapped<TrainStepFn>;
// Host values of one step's outputs: {params, state, loss, accuracy, grad norm}.
using TrainStepOut = std::tuple<ArrayDict, ArrayDict, Array, Array, Array>;

// Correct predictions (argmax of the logits equals the label) summed over every replica's
// shard, as an f32 scalar (exact up to 2^24).
struct CorrectCountFn {
  std::string axis = "batch";
  Model model;
  DType compute_dtype = DType::f32;
  Tensor operator()(const Params& params, const Tensor& x, const Tensor& y) const;
};
using EvalStep = Pmapped<CorrectCountFn>;

TrainStep make_train_step(const Mesh& mesh, TrainStepFn fn, PmapOptions options);
EvalStep make_eval_step(const Mesh& mesh, PmapOptions options, Model model,
                        DType compute_dtype = DType::f32);

// Fraction of `data`'s examples ("images", "labels") the model classifies correctly,
// evaluated data-parallel in batches of `batch_size` (the last one may be smaller: at most
// two compiled shapes). Every replica must call it (it runs collectives).
double evaluate_accuracy(EvalStep& eval, const Mesh& mesh, const ArrayDict& params,
                         const io::Dataset& data, int64_t batch_size = 1000);

}  // namespace fjit::training
