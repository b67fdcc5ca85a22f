#include "parallel/train/sentinel.h"

#include <tuple>

#include "checks/check.h"
#include "core/trace/collectives.h"
#include "core/trace/control_flow.h"
#include "core/trace/ops.h"
#include "core/trace/random.h"

namespace fjit::training {
namespace {

// sum(g * w) in float64 over every tensor, w uniform in [1, 2) from a fixed key per tensor.
Tensor sketch(const TensorDict& grads) {
  Tensor total;
  uint32_t k = 0;
  for (const auto& [name, g] : grads) {
    const Tensor w = uniform(fold_in(PRNGKey(0x5e471e1), k++), g.shape(), DType::f64) + 1.0;
    const Tensor s = sum(cast(g, DType::f64) * w);
    total = total.defined() ? total + s : s;
  }
  return total;
}

// Rows [index * rows, (index + 1) * rows) of `gathered` (every replica's rows, in order).
Tensor rows_of(const Tensor& gathered, int64_t rows, const Tensor& index) {
  const Tensor at = iota(DType::i32, {rows}) + index * static_cast<double>(rows);
  return take(gathered, at, 0);
}

}  // namespace

void check_gradient_sentinel(const TensorDict& grads, const Tensor& x, const Tensor& y, const Tensor& step,
                             int64_t every, const std::string& axis, const ShareGradient& gradient_of) {
  // step % every == 0, in float64 (exact for any i32 step).
  const Tensor s = cast(step, DType::f64);
  const Tensor q = cast(cast(s * (1.0 / static_cast<double>(every)), DType::i32), DType::f64);
  const Tensor due = eq(s - q * static_cast<double>(every), scalar(DType::f64, 0.0));
  const Tensor me = axis_index(axis);
  auto [recomputed, reported, neighbour] = cond(due, [&](const Tensor&) {
    const Tensor sketches = all_gather(reshape(sketch(grads), {1}), axis);
    const int64_t n = sketches.dim(0), rows = x.dim(0);
    const Tensor next = where(eq(me, scalar(DType::i32, static_cast<double>(n - 1))),
                              scalar(DType::i32, 0.0), me + 1.0);
    const TensorDict theirs = gradient_of(rows_of(all_gather(x, axis), rows, next),
                                          rows_of(all_gather(y, axis), rows, next), next);
    return std::tuple{sketch(theirs), reshape(take(sketches, reshape(next, {1}), 0), {}), next};
  }, [&](const Tensor&) {
    return std::tuple{scalar(DType::f64, 0.0), scalar(DType::f64, 0.0), me};
  }, s);
  check(eq(recomputed, reported) || (!isfinite(recomputed) && !isfinite(reported)),
        "sentinel: at step index {}, replica {}'s gradient differs from replica {}'s recomputation "
        "of it (sketches differ by {}): a silent data corruption on one of them",
        step, neighbour, me, recomputed - reported);
}

}  // namespace fjit::training
