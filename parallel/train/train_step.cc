#include "parallel/train/train_step.h"

#include <algorithm>

#include "checks/check.h"
#include "core/autodiff/autodiff.h"
#include "core/lib/accumulate.h"
#include "core/nn/losses.h"
#include "core/nn/precision.h"
#include "core/trace/collectives.h"
#include "core/trace/random.h"
#include "parallel/train/averaged_update.h"
#include "parallel/train/train_step_testing.h"

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

namespace {

// The test seam's sign flip of element 0 of `g` on one replica at one step (train_step_testing.h).
Tensor flipped(const Tensor& g, const testing::GradientFlip& flip, const Tensor& step,
               const std::string& axis) {
  Array first(g.dtype(), g.shape());
  std::fill_n(static_cast<char*>(first.raw()), first.nbytes(), 0);
  if (g.dtype() == DType::f32 && first.size() > 0) first.data<float>()[0] = 1.0f;
  const Tensor hit = cast(eq(step, scalar(step.dtype(), static_cast<double>(flip.step - 1))) &&
                              eq(axis_index(axis), scalar(DType::i32, flip.replica)),
                          g.dtype());
  return g * (1.0 - 2.0 * (hit * constant(first)));
}

// A fixed linear form over a gradient dict: sum of g * w in float64, w pseudo-random in [1, 2)
// from a fixed key (never zero, so any changed element changes the sketch unless changes
// cancel exactly), the same on every replica.
Tensor sketch(const TensorDict& grads) {
  Tensor total;
  uint32_t k = 0;
  for (const auto& [name, g] : grads) {
    const Tensor w = uniform(fold_in(PRNGKey(0x5e471e1), k++), g.shape(), DType::f64) + 1.0;
    Tensor s = sum(cast(g, DType::f64) * w);
    total = total.defined() ? total + s : s;
  }
  return total;
}

// Block `index` (an i32 scalar) of x's leading axis split into `n` equal blocks: a one-hot
// weighted sum, exact for any finite values.
Tensor block_of(const Tensor& gathered, int64_t n, const Tensor& index) {
  Shape blocks = gathered.shape();
  blocks[0] /= n;
  blocks.insert(blocks.begin(), n);
  Shape one_hot_shape(blocks.size(), 1);
  one_hot_shape[0] = n;
  // In float64, exact for every f32 and integer value, then back to the data's own dtype (u8
  // pixels, i32 labels), so the recomputation reads what the replica itself read.
  const Tensor one_hot = reshape(cast(eq(iota(DType::i32, {n}), index), DType::f64), one_hot_shape);
  return cast(sum(reshape(cast(gathered, DType::f64), blocks) * one_hot, {0}), gathered.dtype());
}

}  // namespace

std::tuple<TensorDict, TensorDict, Tensor, Tensor, Tensor> TrainStepFn::operator()(
    const Params& params, const Params& state, const Tensor& x, const Tensor& y,
    const Tensor& step, const Tensor& loss_scale) const {
  Tensor key;
  if (model.uses_key)
    key = fold_in(fold_in(PRNGKey(seed), step), axis_index(axis));
  auto loss_fn = [&](const Params& p, const Tensor& xs, const Tensor& ys) {
    PrecisionScope precision({.compute = compute_dtype});
    auto [loss, logits] = model_loss(model, p, xs, ys, true, key);
    return std::tuple{scaling.on ? loss * loss_scale : loss, logits};
  };
  // One micro-batch is plain value_and_grad; more accumulate over slices of the shard.
  auto [scaled_loss, grads, logits] = accumulate_gradients_aux(loss_fn, micro_batches)(params, x, y);
  const Tensor loss = scaling.on ? scaled_loss / loss_scale : scaled_loss;
  if (const auto& flip = testing::gradient_flip()) grads.set(flip->param, flipped(grads.at(flip->param), *flip, step, axis));
  if (sentinel_every > 0) {
    // step % K == 0 in float64 (exact for any i32 step), then only then the recomputation.
    const Tensor s = cast(step, DType::f64);
    const Tensor q = cast(cast(s * (1.0 / static_cast<double>(sentinel_every)), DType::i32), DType::f64);
    const Tensor due = eq(s - q * static_cast<double>(sentinel_every), scalar(DType::f64, 0.0));
    const Tensor me = axis_index(axis);
    auto [recomputed, reported, neighbour] = cond(due, [&](const Tensor&) {
      // This replica's share again, by the same sub-plan that recomputes the neighbour's: the
      // main plan's gradient may differ from it in the last bits (other kernels, fusions).
      auto [lo, own, logits_o] = accumulate_gradients_aux(loss_fn, micro_batches)(params, x, y);
      if (const auto& flip = testing::gradient_flip())
        own.set(flip->param, flipped(own.at(flip->param), *flip, step, axis));
      const Tensor all_sketches = all_gather(reshape(sketch(own), {1}), axis);
      const int64_t n = all_sketches.dim(0);
      const Tensor next = cast(where(eq(me, scalar(DType::i32, static_cast<double>(n - 1))),
                                     scalar(DType::f64, 0.0), cast(me, DType::f64) + 1.0), DType::i32);
      const Tensor xn = block_of(all_gather(x, axis), n, next);
      const Tensor yn = block_of(all_gather(y, axis), n, next);
      Tensor key_n;
      if (model.uses_key) key_n = fold_in(fold_in(PRNGKey(seed), step), next);
      auto loss_n = [&](const Params& p, const Tensor& xs, const Tensor& ys) {
        auto [l, logits] = model_loss(model, p, xs, ys, true, key_n);
        return std::tuple{scaling.on ? l * loss_scale : l, logits};
      };
      auto [ln, gn, logits_n] = accumulate_gradients_aux(loss_n, micro_batches)(params, xn, yn);
      return std::tuple{sketch(gn), reshape(block_of(all_sketches, n, next), {}), next};
    }, [&](const Tensor&) {
      return std::tuple{scalar(DType::f64, 0.0), scalar(DType::f64, 0.0), me};
    }, s);
    check(eq(recomputed, reported) || (!isfinite(recomputed) && !isfinite(reported)),
          "sentinel: at step index {}, replica {}'s gradient (sketch {}) differs from replica {}'s "
          "recomputation of it: a silent data corruption on one of them",
          step, neighbour, reported, me);
  }
  // Checked before the all-reduce: only the replica with bad data raises, and is named.
  check(isfinite(loss), "loss {} is not finite", loss);
  std::tuple<TensorDict, TensorDict, Tensor> update;
  if (scaling.on) {
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
  // Arguments 4 and 5, the step counter and the loss scale, are scalars every replica gets whole.
  return pmap(mesh, axis, std::move(fn), std::move(options), PmapArgOptions{{4, 5}});
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
