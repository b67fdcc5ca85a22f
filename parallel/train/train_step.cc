#include "parallel/train/train_step.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "checks/check.h"
#include "core/autodiff/autodiff.h"
#include "core/lib/accumulate.h"
#include "core/nn/losses.h"
#include "core/nn/precision.h"
#include "core/trace/collectives.h"
#include "core/trace/random.h"
#include "parallel/train/averaged_update.h"
#include "parallel/train/sentinel.h"
#include "parallel/train/train_step_testing.h"
#include "parallel/train/zero.h"

namespace fjit::training {

std::tuple<Tensor, Tensor> model_loss(const Model& model, const Params& p, const Tensor& x,
                                      const Tensor& y, bool training, const Tensor& key) {
  Tensor logits = model.logits(p, x, training, key);
  const double classes = static_cast<double>(logits.dim(-1));
  // softmax_cross_entropy would silently score a label outside [0, classes) as zero loss.
  check(all((y > -1.0) && (y < classes)), "labels must be classes in [0, {}); batch has min {} max {}",
        scalar(DType::i32, classes), min(y), max(y));
  return {mean(softmax_cross_entropy(logits, y)), logits};
}

Tensor testing::flipped_gradient(const Tensor& g, const GradientFlip& flip, const Tensor& step,
                                 const std::string& axis) {
  Array first(g.dtype(), g.shape());
  std::fill_n(static_cast<char*>(first.raw()), first.nbytes(), 0);
  if (g.dtype() == DType::f32 && first.size() > 0) first.data<float>()[0] = 1.0f;
  const Tensor hit = cast(eq(step, scalar(step.dtype(), static_cast<double>(flip.step - 1))) &&
                              eq(axis_index(axis), scalar(DType::i32, flip.replica)),
                          g.dtype());
  return g * (1.0 - 2.0 * (hit * constant(first)));
}

std::tuple<TensorDict, TensorDict, Tensor, Tensor, Tensor> TrainStepFn::operator()(
    const Params& params, const Params& state, const Tensor& x, const Tensor& y,
    const Tensor& step, const Tensor& loss_scale) const {
  // Stage 3: the whole parameters all-gathered from the shards (`params`) once, here.
  const TensorDict whole = zero_stage == 3 ? zero3_gather_params(params, zero3_shapes, axis) : params;
  // The gradient of the share of replica `replica` (an i32 scalar: its dropout key), whose
  // rows are xs, ys: this replica's own, or, for the sentinel, its neighbour's.
  auto share_gradient = [&](const Tensor& xs, const Tensor& ys, const Tensor& replica) {
    Tensor key;
    if (model.uses_key) key = fold_in(fold_in(PRNGKey(seed), step), replica);
    auto loss_fn = [&](const Params& p, const Tensor& xb, const Tensor& yb) {
      PrecisionScope precision({.compute = compute_dtype});
      auto [loss, logits] = model_loss(model, p, xb, yb, true, key);
      return std::tuple{scaling.on ? loss * loss_scale : loss, logits};
    };
    // One micro-batch is plain value_and_grad; more accumulate over slices of the shard.
    return accumulate_gradients_aux(loss_fn, micro_batches)(whole, xs, ys);
  };
  auto [scaled_loss, grads, logits] = share_gradient(x, y, axis_index(axis));
  const Tensor loss = scaling.on ? scaled_loss / loss_scale : scaled_loss;
  if (const auto& flip = testing::gradient_flip())
    grads.set(flip->param, testing::flipped_gradient(grads.at(flip->param), *flip, step, axis));
  if (sentinel_every > 0) {
    // The sentinel sketches what the all-reduce reads: pmean's operand, the gradient times the
    // replica's mean weight (the same node, so the gradient is not written twice each step; the
    // weights are equal, as the sentinel needs equal shards); with loss scaling, the gradient.
    auto reduced = [&](TensorDict g) {
      if (!scaling.on)
        for (const std::string& name : g.names()) g.set(name, mul(g.at(name), detail::mean_scale(g.at(name).dtype())));
      return g;
    };
    check_gradient_sentinel(reduced(grads), x, y, step, sentinel_every, axis,
                            [&](const Tensor& xs, const Tensor& ys, const Tensor& replica) {
                              return reduced(std::get<1>(share_gradient(xs, ys, replica)));
                            });
  }
  // Checked before the all-reduce: only the replica with bad data raises, and is named.
  check(isfinite(loss), "loss {} is not finite", loss);
  std::tuple<TensorDict, TensorDict, Tensor> update;
  if (zero_stage == 3) {
    update = zero3_adamw_update(params, grads, state, optimizer, schedule, step, max_grad_norm, axis);
  } else if (zero_stage == 2) {
    update = zero2_adamw_update(params, grads, state, optimizer, schedule, step, max_grad_norm, axis);
  } else if (zero_stage == 1) {
    const TensorDict mean_grads = scaling.on ? averaged_unscaled_gradients(grads, loss_scale, scaling.grad_dtype, axis)
                                             : pmean(grads, axis);
    update = zero1_adamw_update_of_mean(params, mean_grads, state, optimizer, schedule, step, max_grad_norm, axis);
  } else if (scaling.on) {
    update = adamw_update_of_mean(params, averaged_unscaled_gradients(grads, loss_scale, scaling.grad_dtype, axis),
                                  state, optimizer, schedule, step, max_grad_norm, /*clip_norm=*/0);
  } else {
    update = averaged_adamw_update(params, grads, state, optimizer, schedule, step, max_grad_norm,
                                   /*clip_norm=*/0, axis);
  }
  auto& [next_params, next_state, norm] = update;
  Tensor accuracy = mean(cast(eq(argmax(logits, -1), y), DType::f32));
  return {next_params, next_state, pmean(loss, axis), pmean(accuracy, axis), norm};
}

std::tuple<TensorDict, TensorDict, Tensor> averaged_adamw_update(
    const Params& params, const TensorDict& grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, double clip_norm,
    const std::string& axis, const std::vector<ParamGroup>& groups,
    const std::vector<std::string>* pattern_names) {
  return adamw_update_of_mean(params, pmean(grads, axis), state, optimizer, schedule, step,
                              max_grad_norm, clip_norm, groups, pattern_names);
}

std::tuple<TensorDict, TensorDict, Tensor> adamw_update_of_mean(
    const Params& params, const TensorDict& mean_grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, double clip_norm,
    const std::vector<ParamGroup>& groups, const std::vector<std::string>* pattern_names) {
  Tensor norm;
  TensorDict clipped = clip_norm > 0 ? clip_by_global_norm(mean_grads, clip_norm, &norm) : mean_grads;
  if (clip_norm <= 0) norm = global_norm(mean_grads);
  check(isfinite(norm) && norm < max_grad_norm,
        "global gradient norm {} is not finite or not below {}", norm,
        scalar(norm.dtype(), max_grad_norm));
  AdamW opt = optimizer;
  opt.lr = schedule(step);
  auto [next_params, next_state] = grouped_update(opt, groups, params, clipped, state, pattern_names);
  return {next_params, next_state, norm};
}

Tensor CorrectCountFn::operator()(const Params& params, const Tensor& x, const Tensor& y) const {
  PrecisionScope precision({.compute = compute_dtype});
  Tensor correct = sum(cast(eq(argmax(model.logits(params, x, false, Tensor()), -1), y), DType::f32));
  return psum(correct, axis);
}

TrainStep make_train_step(const Mesh& mesh, TrainStepFn fn, PmapOptions options) {
  if (options.jit.name == "fn") options.jit.name = "train_step";
  const std::string axis = fn.axis;
  if (fn.zero_stage < 0 || fn.zero_stage > 3)
    throw std::invalid_argument(fmt::format("make_train_step: zero_stage {} is not implemented (0 to 3)", fn.zero_stage));
  if (fn.zero_stage >= 2 && fn.scaling.on)
    throw std::invalid_argument(fmt::format("make_train_step: zero_stage {} does not take loss scaling (use zero_stage 1)",
                                            fn.zero_stage));
  if (fn.zero_stage == 3 && fn.zero3_shapes.empty())
    throw std::invalid_argument("make_train_step: zero_stage 3 needs zero3_shapes (zero_param_shapes of the parameters)");
  // Arguments 4 and 5, the step counter and the loss scale, are scalars every replica gets
  // whole; with ZeRO, argument 1, the optimizer state, is sharded.
  PmapArgOptions args{{4, 5}, {}};
  if (fn.zero_stage > 0) args.sharded_dicts = {1};
  if (fn.zero_stage == 3) args.sharded_dicts = {0, 1};  // the parameters too
  return pmap(mesh, axis, std::move(fn), std::move(options), std::move(args));
}

EvalStep make_eval_step(const Mesh& mesh, PmapOptions options, Model model, DType compute_dtype) {
  if (options.jit.name == "fn") options.jit.name = "eval_step";
  return pmap(mesh, "batch", CorrectCountFn{"batch", std::move(model), compute_dtype}, std::move(options));
}

double evaluate_accuracy(EvalStep& eval, const Mesh& mesh, const ArrayDict& params,
                         const io::Dataset& data, int64_t batch_size) {
  if (data.size() == 0) return 0.0;
  // In stored order, the last batch kept: at most two compiled shapes. Each process reads
  // only its replicas' rows.
  io::BatchIterator batches(data, {.batch_size = batch_size, .shuffle = false, .drop_last = false,
                                   .shard = mesh.data_shard()});
  Array correct;
  double total = 0;
  while (const io::Batch* b = batches.next()) {
    eval.run_into(correct, params, (*b)["images"], (*b)["labels"]);
    total += correct.item<double>();
  }
  return total / static_cast<double>(data.size());
}

}  // namespace fjit::training
