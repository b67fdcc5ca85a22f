#include "lib/mlp_model.h"

#include <cstring>
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
    const Tensor& lr) const {
  auto [loss, grads, logits] = value_and_grad_aux(mlp_loss)(params, x, y);
  // Checked before the all-reduce: only the replica with bad data raises, and is named.
  check(isfinite(loss), "loss {} is not finite", loss);
  TensorDict mean_grads = pmean(grads, axis);
  Tensor norm = global_norm(mean_grads);
  check(isfinite(norm) && norm < max_grad_norm,
        "global gradient norm {} is not finite or not below {}", norm,
        scalar(norm.dtype(), max_grad_norm));
  AdamW opt = optimizer;
  opt.lr = lr;
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
  // Argument 4, the learning rate, is a scalar every replica gets whole.
  return pmap(mesh, axis, std::move(fn), std::move(options), PmapArgOptions{{4}});
}

EvalStep make_eval_step(const Mesh& mesh, PmapOptions options) {
  if (options.jit.name == "fn") options.jit.name = "eval_step";
  return pmap(mesh, "batch", CorrectCountFn{"batch"}, std::move(options));
}

void copy_rows(const Array& src, int64_t begin, int64_t end, Array& dst) {
  if (src.rank() < 1 || begin < 0 || end < begin || end > src.shape()[0])
    throw std::invalid_argument("copy_rows: rows [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") of " + type_str(src.dtype(), src.shape()));
  Shape shape = src.shape();
  shape[0] = end - begin;
  if (!dst.defined() || dst.dtype() != src.dtype() || dst.shape() != shape) dst = Array(src.dtype(), shape);
  const size_t row_bytes = src.shape()[0] ? src.nbytes() / src.shape()[0] : 0;
  if (end > begin)
    std::memcpy(dst.raw(), static_cast<const std::byte*>(src.raw()) + begin * row_bytes,
                (end - begin) * row_bytes);
}

// The rows of a batch of `rows` that this process's replicas hold between them.
static std::pair<int64_t, int64_t> process_rows(const Mesh& mesh, int64_t rows) {
  const int first = mesh.first_replica(), last = first + mesh.local_size() - 1;
  return {Mesh::shard_range(rows, mesh.size(), first).first,
          Mesh::shard_range(rows, mesh.size(), last).second};
}

const Array& local_part(const Mesh& mesh, const Array& global, Array& buffer) {
  if (mesh.local_size() == mesh.size()) return global;  // this process runs every replica
  auto [begin, end] = process_rows(mesh, global.shape()[0]);
  copy_rows(global, begin, end, buffer);
  return buffer;
}

double evaluate_accuracy(EvalStep& eval, const Mesh& mesh, const ArrayDict& params,
                         const Array& images, const Array& labels, int64_t batch_size) {
  const int64_t n = images.shape()[0];
  if (n == 0) return 0.0;
  Array x, y, correct;
  double total = 0;
  for (int64_t first = 0; first < n; first += batch_size) {
    const int64_t last = std::min(n, first + batch_size);
    int64_t begin = first, end = last;
    if (mesh.local_size() != mesh.size()) {  // this process's rows of the batch
      auto [b, e] = process_rows(mesh, last - first);
      begin = first + b;
      end = first + e;
    }
    copy_rows(images, begin, end, x);
    copy_rows(labels, begin, end, y);
    eval.run_into(correct, params, x, y);
    total += correct.item<double>();
  }
  return total / static_cast<double>(n);
}

}  // namespace fjit::examples
