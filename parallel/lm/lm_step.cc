#include "parallel/lm/lm_step.h"

#include <stdexcept>

#include <fmt/format.h>

#include "checks/check.h"
#include "core/autodiff/autodiff.h"
#include "core/nn/losses.h"
#include "core/nn/precision.h"
#include "core/trace/collectives.h"
#include "parallel/train/averaged_update.h"
#include "parallel/train/train_step_testing.h"
#include "parallel/train/zero.h"

namespace fjit::lm {

void check_token_ids(const Tensor& ids, int64_t vocab, const char* what) {
  const Tensor bad = (ids < 0.0) || (ids > static_cast<double>(vocab - 1));
  // The first bad element in row-major order: its row, then its column within the row.
  const int64_t cols = ids.dim(1);
  const Tensor row = reshape(argmax(cast(any(bad, {1}), DType::i32), 0), {1});
  const Tensor row_ids = reshape(gather(ids, row, 0), {cols});
  const Tensor col = reshape(argmax(cast(reshape(gather(bad, row, 0), {cols}), DType::i32), 0), {1});
  const std::string message = std::string(what) +
                              " token ids must be in [0, {}): id {} at row {} column {} of this shard";
  check(!any(bad), message, scalar(DType::i32, static_cast<double>(vocab)),
        reshape(gather(row_ids, col, 0), {}), reshape(row, {}), reshape(col, {}));
}

std::tuple<TensorDict, TensorDict, Tensor, Tensor> LmStepFn::operator()(
    const Params& params, const Params& state, const Tensor& inputs, const Tensor& targets,
    const Tensor& step) const {
  return train(params, Params{}, state, inputs, targets, step);
}

std::tuple<TensorDict, TensorDict, Tensor, Tensor> LmStepFn::train(
    const Params& trainable, const Params& frozen, const Params& state, const Tensor& inputs,
    const Tensor& targets, const Tensor& step, const Tensor& loss_scale) const {
  if (scaling.on && !loss_scale.defined())
    throw TraceError("fjit: lm_step: loss scaling is on but the step was given no loss scale");
  check_token_ids(inputs, model.vocab, "input");
  check_token_ids(targets, model.vocab, "target");
  std::vector<std::string> names = trainable.names();
  for (const auto& [name, p] : frozen) {
    if (trainable.contains(name))
      throw std::invalid_argument("lm_step: parameter '" + name + "' is both trainable and frozen");
    names.push_back(name);
  }
  auto loss_fn = [&](const Params& t) {
    PrecisionScope precision({.compute = compute_dtype});
    Params all = frozen;
    for (const auto& [name, p] : t) all.set(name, p);
    Tensor loss = mean(softmax_cross_entropy(decoder_logits(all, model, inputs), targets));
    return scaling.on ? loss * loss_scale : loss;
  };
  // Stage 3: `trainable` holds this replica's shards, all-gathered whole here.
  const TensorDict whole = zero_stage == 3 ? training::zero3_gather_params(trainable, zero3_shapes, axis) : trainable;
  auto [scaled_loss, grads] = value_and_grad(loss_fn)(whole);
  if (const auto& flip = training::testing::gradient_flip())
    grads.set(flip->param, training::testing::flipped_gradient(grads.at(flip->param), *flip, step, axis));
  const Tensor loss = scaling.on ? scaled_loss / loss_scale : scaled_loss;
  check(isfinite(loss), "loss {} is not finite", loss);
  std::tuple<TensorDict, TensorDict, Tensor> update;
  const training::ZeroClip clip{clip_grad_norm, groups, &names};
  if (zero_stage == 3) {
    update = training::zero3_adamw_update(trainable, grads, state, optimizer, schedule, step, max_grad_norm, axis, clip);
  } else if (zero_stage == 2) {
    update = training::zero2_adamw_update(trainable, grads, state, optimizer, schedule, step, max_grad_norm, axis, clip);
  } else if (zero_stage == 1) {
    const TensorDict mean_grads =
        scaling.on ? training::averaged_unscaled_gradients(grads, loss_scale, scaling.grad_dtype, axis) : pmean(grads, axis);
    update = training::zero1_adamw_update_of_mean(trainable, mean_grads, state, optimizer, schedule, step,
                                                  max_grad_norm, axis, clip_grad_norm, groups, &names);
  } else if (scaling.on) {
    update = training::adamw_update_of_mean(
        trainable, training::averaged_unscaled_gradients(grads, loss_scale, scaling.grad_dtype, axis),
        state, optimizer, schedule, step, max_grad_norm, clip_grad_norm, groups, &names);
  } else {
    update = training::averaged_adamw_update(trainable, grads, state, optimizer, schedule, step,
                                             max_grad_norm, clip_grad_norm, axis, groups, &names);
  }
  auto& [next_params, next_state, norm] = update;
  return {next_params, next_state, pmean(loss, axis), norm};
}

Tensor LmLossSumFn::operator()(const Params& params, const Tensor& inputs,
                               const Tensor& targets) const {
  check_token_ids(inputs, model.vocab, "input");
  check_token_ids(targets, model.vocab, "target");
  PrecisionScope precision({.compute = compute_dtype});
  return psum(sum(softmax_cross_entropy(decoder_logits(params, model, inputs), targets)), axis);
}

namespace {

void require_zero_stage(const LmStepFn& fn) {
  if (fn.zero_stage < 0 || fn.zero_stage > 3)
    throw std::invalid_argument(fmt::format("lm_step: zero_stage {} is not implemented (0 to 3)", fn.zero_stage));
  if (fn.zero_stage >= 2 && fn.scaling.on)
    throw std::invalid_argument(fmt::format("lm_step: zero_stage {} does not take loss scaling (use zero_stage 1)",
                                            fn.zero_stage));
  if (fn.zero_stage == 3 && fn.zero3_shapes.empty())
    throw std::invalid_argument("lm_step: zero_stage 3 needs zero3_shapes (zero_param_shapes of the trainable parameters)");
}

}  // namespace

LmStep make_lm_step(const Mesh& mesh, LmStepFn fn, PmapOptions options) {
  if (options.jit.name == "fn") options.jit.name = "lm_step";
  require_zero_stage(fn);
  const std::string axis = fn.axis;
  PmapArgOptions args{{4}, {}};
  if (fn.zero_stage > 0) args.sharded_dicts = {1};
  if (fn.zero_stage == 3) args.sharded_dicts = {0, 1};  // the parameters too
  return pmap(mesh, axis, std::move(fn), std::move(options), std::move(args));
}

LmSplitStep make_lm_split_step(const Mesh& mesh, LmStepFn fn, PmapOptions options) {
  if (options.jit.name == "fn") options.jit.name = "lm_step";
  require_zero_stage(fn);
  const std::string axis = fn.axis;
  PmapArgOptions args{{5, 6}, {}};
  if (fn.zero_stage > 0) args.sharded_dicts = {2};
  if (fn.zero_stage == 3) args.sharded_dicts = {0, 2};  // the trainable parameters too
  return pmap(mesh, axis, LmSplitStepFn{std::move(fn)}, std::move(options), std::move(args));
}

LmEval make_lm_eval(const Mesh& mesh, DecoderConfig model, PmapOptions options, DType compute_dtype) {
  if (options.jit.name == "fn") options.jit.name = "lm_eval";
  return pmap(mesh, "batch", LmLossSumFn{std::move(model), "batch", compute_dtype}, std::move(options));
}

}  // namespace fjit::lm
