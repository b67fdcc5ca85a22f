// Gradient accumulation over micro-batches, inside one traced step.
//
//   auto [loss, grads] = accumulate_gradients(loss_fn, 4)(params, x, y);
//   // as value_and_grad(loss_fn)(params, x, y), over 4 slices of x and y in turn
//
// Promises:
//  - Every batch argument (a Tensor of rank >= 1) is split along axis 0 into `micro_batches`
//    consecutive slices whose sizes differ by at most one row (io::split_rows), all arguments
//    at the same rows. loss_fn(params, slice...) must return a scalar loss that is a mean
//    over the slice's rows. The result is the row-weighted mean of the micro-batch losses and
//    gradients: the full batch's loss and gradient up to rounding, so a step that all-reduces
//    once per accumulated batch trains as it would on the full batch.
//  - The micro-batches are traced one after another, so the compiled plan needs one
//    micro-batch's activations at a time (plus one set of gradient accumulators) where the
//    full batch would need them all at once.
//  - A batch with fewer rows than micro_batches, batch arguments that disagree on their row
//    count, or micro_batches < 1 is a TraceError naming accumulate_gradients, the shapes
//    and the call site.
//  - accumulate_gradients_aux: for loss_fn returning std::tuple{loss, aux} where aux is a
//    Tensor with one row per example (logits, per-example losses): the micro-batches' aux
//    values are concatenated back into the full batch's rows.
#pragma once

#include <tuple>
#include <vector>

#include "core/autodiff/autodiff.h"
#include "core/lib/data.h"
#include "core/trace/dict.h"
#include "core/trace/tensor.h"

namespace fjit {
namespace detail {

// Validates the batch arguments and returns their common row count.
int64_t accumulation_rows(const std::vector<Tensor>& batch, int micro_batches, Loc loc);
// Rows [begin, end) of x along axis 0.
Tensor micro_slice(const Tensor& x, int64_t begin, int64_t end, Loc loc);
// acc + w * g, name by name (acc empty: w * g).
TensorDict accumulate_scaled(const TensorDict& acc, const TensorDict& g, double w, Loc loc);

template <bool HasAux, class F, class... B>
auto accumulate(const F& loss_fn, int micro_batches, Loc loc, const TensorDict& params,
                const B&... batch) {
  const int64_t rows = accumulation_rows({batch...}, micro_batches, loc);
  Tensor loss;
  TensorDict grads;
  std::vector<Tensor> aux;
  for (int k = 0; k < micro_batches; ++k) {
    const auto [b, e] = io::split_rows(rows, micro_batches, k);
    const double w = static_cast<double>(e - b) / static_cast<double>(rows);
    Tensor l;
    TensorDict g;
    if constexpr (HasAux) {
      auto [l_k, g_k, a_k] = value_and_grad_aux(loss_fn, loc)(params, micro_slice(batch, b, e, loc)...);
      l = l_k;
      g = g_k;
      aux.push_back(a_k);
    } else {
      std::tie(l, g) = value_and_grad(loss_fn, loc)(params, micro_slice(batch, b, e, loc)...);
    }
    const Tensor weighted = mul(l, scalar(l.dtype(), w, loc), loc);
    loss = k == 0 ? weighted : add(loss, weighted, loc);
    grads = accumulate_scaled(grads, g, w, loc);
  }
  if constexpr (HasAux)
    return std::tuple{loss, grads, micro_batches == 1 ? aux[0] : concat(aux, 0, loc)};
  else
    return std::tuple{loss, grads};
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
