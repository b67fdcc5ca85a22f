#include "lib/mlp_model.h"

#include <optional>
#include <stdexcept>

#include "core/lib/initializers.h"

namespace fjit::examples {

ArrayDict init_mlp(const std::vector<int64_t>& sizes, uint64_t seed) {
  return mlp_params(sizes, seed, Init::he_normal);
}

Tensor mlp_logits(const Params& p, const Tensor& x) {
  const size_t layers = p.size() / 2;
  Tensor h = x;
  for (size_t k = 1; k <= layers; ++k) {
    h = matmul(h, p["w" + std::to_string(k)]) + p["b" + std::to_string(k)];
    if (k < layers) h = relu(h);
  }
  return h;
}

std::tuple<Tensor, Tensor> mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  Tensor logits = mlp_logits(p, x);
  const double classes = static_cast<double>(logits.dim(-1));
  // softmax_cross_entropy would silently score a label outside [0, classes) as zero loss.
  check(all((y > -1.0) && (y < classes)), "labels must be classes in [0, {}); batch has min {} max {}",
        scalar(DType::i32, classes), min(y), max(y));
  return {mean(softmax_cross_entropy(logits, y)), logits};
}

std::tuple<TensorDict, TensorDict, Tensor, Tensor, Tensor> TrainStepFn::operator()(
    const Params& params, const Params& state, const Tensor& x, const Tensor& y,
    const Tensor& step) const {
  // One micro-batch is plain value_and_grad; more accumulate over slices of the shard.
  auto [loss, grads, logits] = accumulate_gradients_aux(mlp_loss, micro_batches)(params, x, y);
  // Checked before the all-reduce: only the replica with bad data raises, and is named.
  check(isfinite(loss), "loss {} is not finite", loss);
  TensorDict mean_grads = pmean(grads, axis);
  Tensor norm = global_norm(mean_grads);
  check(isfinite(norm) && norm < max_grad_norm,
        "global gradient norm {} is not finite or not below {}", norm,
        scalar(norm.dtype(), max_grad_norm));
  AdamW opt = optimizer;
  opt.lr = schedule(step);
  auto [next_params, next_state] = opt.update(params, mean_grads, state);
  Tensor accuracy = mean(cast(eq(argmax(logits, -1), y), DType::f32));
  return {next_params, next_state, pmean(loss, axis), pmean(accuracy, axis), norm};
}

Tensor CorrectCountFn::operator()(const Params& params, const Tensor& x, const Tensor& y) const {
  Tensor correct = sum(cast(eq(argmax(mlp_logits(params, x), -1), y), DType::f32));
  return psum(correct, axis);
}

TrainStep make_train_step(const Mesh& mesh, TrainStepFn fn, PmapOptions options) {
  if (options.jit.name == "fn") options.jit.name = "train_step";
  const std::string axis = fn.axis;
  // Argument 4, the step counter, is a scalar every replica gets whole.
  return pmap(mesh, axis, std::move(fn), std::move(options), PmapArgOptions{{4}});
}

EvalStep make_eval_step(const Mesh& mesh, PmapOptions options) {
  if (options.jit.name == "fn") options.jit.name = "eval_step";
  return pmap(mesh, "batch", CorrectCountFn{"batch"}, std::move(options));
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

}  // namespace fjit::examples
