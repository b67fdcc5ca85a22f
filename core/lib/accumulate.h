// Gradient accumulation over micro-batches, inside one traced step.
//
//   auto [loss, grads] = accumulate_gradients(loss_fn, 4)(params, x, y);
//   // as value_and_grad(loss_fn)(params, x, y), over 4 slices of x and y in turn
//
// Promises:
//  - Every batch argument (a Tensor of rank >= 1) is split along axis 0 into `micro_batches`
//    consecutive slices whose sizes differ by at most one row (split_rows, core/base/split_rows.h), all arguments
//    at the same rows. loss_fn(params, slice...) must return a scalar loss that is a mean
//    over the slice's rows. The result is the row-weighted mean of the micro-batch losses and
//    gradients: the full batch's loss and gradient up to rounding, so a step that all-reduces
//    once per accumulated batch trains as it would on the full batch.
//  - The micro-batches run as a loop (scan, core/trace/control_flow.h) whose body is traced
//    once: the plan's size does not grow with micro_batches, and it needs one micro-batch's
//    activations at a time (plus one set of gradient accumulators) where the full batch
//    would need them all at once. Micro-batches of equal size share one loop; an uneven split
//    (rows % micro_batches != 0) makes two loops, the larger micro-batches' first. The loss
//    and the gradients are summed in micro-batch order, starting from zero, as
//    sum_k (rows_k / rows) * value_k; the loss accumulator has the dtype of the first
//    parameter (so loss_fn's loss must too).
//  - A batch of zero rows (a replica that joined with no data, parallel/join.h) is one
//    micro-batch, the empty one: with a loss that is a mean (the mean of no rows is 0) the
//    loss and every gradient are 0, and pmean gives such a replica weight 0.
//  - A batch with fewer rows than micro_batches (but more than zero), batch arguments that
//    disagree on their row count, or micro_batches < 1 is a TraceError naming
//    accumulate_gradients, the shapes and the call site.
//  - accumulate_gradients_aux: for loss_fn returning std::tuple{loss, aux} where aux is a
//    Tensor with one row per example (logits, per-example losses): the micro-batches' aux
//    values are concatenated back into the full batch's rows.
#pragma once

#include <tuple>
#include <vector>

#include "core/autodiff/autodiff.h"
#include "core/base/split_rows.h"
#include "core/trace/control_flow.h"
#include "core/trace/dict.h"
#include "core/trace/tensor.h"

namespace fjit {
namespace detail {

// Validates the batch arguments and returns their common row count.
int64_t accumulation_rows(const std::vector<Tensor>& batch, int micro_batches, Loc loc);
// Consecutive micro-batches of equal size (split_rows, core/base/split_rows.h): one loop each.
struct MicroGroup {
  int64_t begin = 0, size = 0, count = 0;
};
std::vector<MicroGroup> micro_groups(int64_t rows, int micro_batches);
// The group's rows of x as [count, size, ...].
Tensor group_rows(const Tensor& x, const MicroGroup& g, Loc loc);
// The accumulators' start: [zero loss, zero gradient per parameter].
std::vector<Tensor> zero_accumulators(const TensorDict& params, Loc loc);
// acc + w * v, leaf by leaf ([loss, gradients...]).
std::vector<Tensor> accumulate_scaled(const std::vector<Tensor>& acc, const std::vector<Tensor>& v, double w,
                                      Loc loc);

template <bool HasAux, class F, size_t... I>
auto micro_step(const F& loss_fn, Loc loc, const TensorDict& params, const std::vector<Tensor>& rows,
                std::index_sequence<I...>) {
  if constexpr (HasAux) return value_and_grad_aux(loss_fn, loc)(params, rows[I]...);
  else return value_and_grad(loss_fn, loc)(params, rows[I]...);
}

template <bool HasAux, class F, class... B>
auto accumulate(const F& loss_fn, int micro_batches, Loc loc, const TensorDict& params,
                const B&... batch) {
  const int64_t rows = accumulation_rows({batch...}, micro_batches, loc);
  if (micro_batches == 1 || rows == 0) return micro_step<HasAux>(loss_fn, loc, params, {batch...}, std::index_sequence_for<B...>{});
  std::vector<Tensor> acc = zero_accumulators(params, loc);
  std::vector<Tensor> aux;
  for (const MicroGroup& grp : micro_groups(rows, micro_batches)) {
    const double w = static_cast<double>(grp.size) / static_cast<double>(rows);
    auto body = [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& x) {
      auto r = micro_step<HasAux>(loss_fn, loc, params, x, std::index_sequence_for<B...>{});
      std::vector<Tensor> v{std::get<0>(r)};
      flatten(std::get<1>(r), v);
      ScanStep s{accumulate_scaled(carry, v, w, loc), {}};
      if constexpr (HasAux) s.ys.push_back(std::get<2>(r));
      return s;
    };
    ScanLeaves out = scan_leaves("accumulate_gradients", body, acc, {group_rows(batch, grp, loc)...}, loc);
    acc = out.carry;
    if constexpr (HasAux) {
      Shape merged = out.ys[0].shape();
      merged[1] *= merged[0];
      merged.erase(merged.begin());
      aux.push_back(reshape(out.ys[0], merged, loc));
    }
  }
  size_t p = 1;
  TensorDict grads = unflatten(params, acc, p);
  if constexpr (HasAux)
    return std::tuple{acc[0], grads, aux.size() == 1 ? aux[0] : concat(aux, 0, loc)};
  else
    return std::tuple{acc[0], grads};
}

}  // namespace detail

// accumulate_gradients(loss_fn, k)(params, batch...) -> std::tuple{loss, grads}.
template <class F>
auto accumulate_gradients(F loss_fn, int micro_batches, Loc loc = Loc::current()) {
  return [loss_fn = std::move(loss_fn), micro_batches, loc](const TensorDict& params,
                                                            const auto&... batch) {
    return detail::accumulate<false>(loss_fn, micro_batches, loc, params, batch...);
  };
}

// accumulate_gradients_aux(loss_fn, k)(params, batch...) -> std::tuple{loss, grads, aux}.
template <class F>
auto accumulate_gradients_aux(F loss_fn, int micro_batches, Loc loc = Loc::current()) {
  return [loss_fn = std::move(loss_fn), micro_batches, loc](const TensorDict& params,
                                                            const auto&... batch) {
    return detail::accumulate<true>(loss_fn, micro_batches, loc, params, batch...);
  };
}

}  // namespace fjit
