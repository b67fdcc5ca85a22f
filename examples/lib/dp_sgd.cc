#include "lib/dp_sgd.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "lib/mlp_model.h"

namespace fjit::examples {
namespace {

// Every axis of g but the batch axis 0.
Axes example_axes(const Tensor& g) {
  Axes axes;
  for (int a = 1; a < g.rank(); ++a) axes.push_back(a);
  return axes;
}

// factors [B] broadcast against g [B, ...].
Tensor along_batch(const Tensor& factors, const Tensor& g) {
  Shape s(static_cast<size_t>(g.rank()), 1);
  s[0] = g.dim(0);
  return reshape(factors, s);
}

}  // namespace

Tensor mlp_example_loss(const Params& p, const Tensor& x, const Tensor& y) {
  return sum(softmax_cross_entropy(mlp_logits(p, reshape(x, {1, -1})), reshape(y, {1})));
}

TensorDict per_example_gradients(const ExampleLoss& loss, const Params& p, const Tensor& x,
                                 const Tensor& y) {
  return vmap(grad(loss), {kUnbatched, 0, 0})(p, x, y);
}

Tensor per_example_norms(const TensorDict& grads) {
  Tensor sq;
  for (const auto& [name, g] : grads) {
    Tensor s = sum(square(g), example_axes(g));
    sq = sq.defined() ? sq + s : s;
  }
  return sqrt(sq);
}

Tensor clip_factors(const Tensor& norms, double clip) {
  const Tensor c = scalar(norms.dtype(), clip);
  return c / maximum(norms, c);
}

TensorDict clipped_sum(const TensorDict& grads, const Tensor& factors) {
  TensorDict out;
  const int64_t b = factors.dim(0);
  for (const auto& [name, g] : grads) {
    // One row-vector product [1, B] x [B, N]: the weighted sum over the batch in one pass.
    Tensor flat = reshape(g, {b, -1});
    Tensor s = matmul(reshape(factors, {1, b}), flat);
    Shape shape = g.shape();
    shape.erase(shape.begin());
    out.set(name, reshape(s, shape));
  }
  return out;
}

int fixed_point_bits(double clip) {
  if (!std::isfinite(clip) || clip <= 0)
    throw std::invalid_argument(fmt::format("dp_sgd: the clipping norm C must be finite and positive, not {}", clip));
  return static_cast<int>(std::floor(30.0 - std::log2(clip)));
}

FixedSum clipped_sum_fixed(const TensorDict& grads, const Tensor& factors, int k) {
  FixedSum out;
  const Tensor scaled_factors = factors * std::ldexp(1.0, k);  // exact: a power of two
  for (const auto& [name, g] : grads) {
    const Tensor v = g * along_batch(scaled_factors, g);  // |v| <= 2^30 (saturated past 2^31)
    // Truncation toward zero to i32; hi is exact in f32 (an f32 of magnitude 2^23 or more is
    // an integer), and so is v - hi, the fraction of v.
    const Tensor hi = cast(cast(v, DType::i32), DType::f32);
    const Tensor lo = cast((v - hi) * std::ldexp(1.0, 31), DType::i32);
    out.hi.set(name, sum(cast(hi, DType::f64), {0}));
    out.lo.set(name, sum(cast(lo, DType::f64), {0}));
  }
  return out;
}

TensorDict noised_mean(const FixedSum& fixed, int k, const Tensor& key, double clip, double noise,
                       const Tensor& global_count) {
  TensorDict out;
  uint32_t leaf = 0;
  for (const auto& [name, hi] : fixed.hi) {
    const Tensor s = hi + fixed.lo.at(name) * std::ldexp(1.0, -31);
    Tensor g = cast(s * std::ldexp(1.0, -k), DType::f32);
    if (noise > 0) g = g + normal(fold_in(key, leaf), s.shape(), DType::f32) * (noise * clip);
    out.set(name, g / global_count);
    ++leaf;
  }
  return out;
}

std::tuple<TensorDict, TensorDict, Tensor, Tensor> DpSgdStepFn::operator()(
    const Params& params, const Params& state, const Tensor& x, const Tensor& y,
    const Tensor& step) const {
  const int k = fixed_point_bits(clip);
  auto [losses, grads] = vmap(value_and_grad(mlp_example_loss), {kUnbatched, 0, 0})(params, x, y);
  const Tensor norms = per_example_norms(grads);
  const Tensor local_count = scalar(DType::f32, static_cast<double>(x.dim(0)));
  const Tensor global_count = psum(local_count, axis);
  FixedSum sums = clipped_sum_fixed(grads, clip_factors(norms, clip), k);
  sums.hi = psum(sums.hi, axis);
  sums.lo = psum(sums.lo, axis);
  // The same key on every replica: the noise is drawn once for the global batch.
  const Tensor key = fold_in(PRNGKey(seed), step);
  const TensorDict mean_grad = noised_mean(sums, k, key, clip, noise, global_count);
  AdamW opt = optimizer;
  opt.lr = schedule(step);
  auto [next_params, next_state] = opt.update(params, mean_grad, state);
  const Tensor loss = psum(sum(losses), axis) / global_count;
  const Tensor clipped = psum(sum(cast(norms > clip, DType::f32)), axis) / global_count;
  return {next_params, next_state, loss, clipped};
}

DpSgdStep make_dp_sgd_step(const Mesh& mesh, DpSgdStepFn fn, PmapOptions options) {
  fixed_point_bits(fn.clip);
  if (!(fn.noise >= 0) || !std::isfinite(fn.noise))
    throw std::invalid_argument(fmt::format("dp_sgd: the noise multiplier sigma must be finite and >= 0, not {}", fn.noise));
  if (options.jit.name == "fn") options.jit.name = "dp_sgd_step";
  const std::string axis = fn.axis;
  return pmap(mesh, axis, std::move(fn), std::move(options), PmapArgOptions{{4}, {}});
}

}  // namespace fjit::examples
