#include "parallel/train/sentinel.h"

#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "checks/check.h"
#include "core/trace/collectives.h"
#include "core/trace/control_flow.h"
#include "core/trace/ops.h"
#include "core/trace/random.h"

namespace fjit::training {
namespace {

constexpr uint64_t kSketchSeed = 0x5e471e1;

// sum(g * w) in float64 over every tensor. w is an outer product of one vector per axis,
// uniform in [1, 2) from `key` folded with the tensor's and the axis's positions: every weight
// is at least 1 (a changed element changes the sum), two elements in different rows or columns
// get different weights (a swap changes it too), and the weights cost a draw per row and
// column, not per element.
Tensor sketch(const TensorDict& grads, const Tensor& key) {
  Tensor total;
  uint32_t k = 0;
  for (const auto& [name, g] : grads) {
    Tensor weighted = cast(g, DType::f64);
    for (int64_t axis = 0; axis < g.rank(); ++axis) {
      Shape along(static_cast<size_t>(g.rank()), 1);
      along[static_cast<size_t>(axis)] = g.dim(axis);
      const Tensor w = uniform(fold_in(key, k * 16 + static_cast<uint32_t>(axis)), {g.dim(axis)}, DType::f64) + 1.0;
      weighted = weighted * reshape(w, along);
    }
    ++k;
    const Tensor s = sum(weighted);
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
  // Everything the due branch computes is a function of the cond's operands: a value it read
  // from the enclosing trace alone would be hoisted out of the branch and computed every step
  // (core/trace/region_trace.h), the recomputation and the sketch weights included.
  auto [recomputed, reported, neighbour] = cond(due, [&](const Tensor&, const Tensor& xs, const Tensor& ys,
                                                         const TensorDict& gs, const Tensor& key) {
    const Tensor sketches = all_gather(reshape(sketch(gs, key), {1}), axis);
    const int64_t n = sketches.dim(0), rows = xs.dim(0);
    const Tensor next = where(eq(me, scalar(DType::i32, static_cast<double>(n - 1))),
                              scalar(DType::i32, 0.0), me + 1.0);
    const Tensor all_xs = all_gather(xs, axis);
    if (all_xs.dim(0) != n * rows)
      throw std::invalid_argument(fmt::format(
          "sentinel: replicas' shares of the batch differ in size ({} rows here, {} over {} replicas): it "
          "recomputes a neighbour's share from equal shares only", rows, all_xs.dim(0), n));
    const TensorDict theirs = gradient_of(rows_of(all_xs, rows, next), rows_of(all_gather(ys, axis), rows, next), next);
    return std::tuple{sketch(theirs, key), reshape(take(sketches, reshape(next, {1}), 0), {}), next};
  }, [&](const Tensor&, const Tensor&, const Tensor&, const TensorDict&, const Tensor&) {
    return std::tuple{scalar(DType::f64, 0.0), scalar(DType::f64, 0.0), me};
  }, s, x, y, grads, PRNGKey(kSketchSeed));
  check_of_kind(CheckKind::sentinel, eq(recomputed, reported) || (!isfinite(recomputed) && !isfinite(reported)),
        "sentinel: at step index {}, replica {}'s gradient differs from replica {}'s recomputation "
        "of it (sketches differ by {}): a silent data corruption on one of them",
        step, neighbour, me, recomputed - reported);
}

}  // namespace fjit::training
