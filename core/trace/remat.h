// remat (jax.checkpoint): trade compute for memory in reverse mode.
//
//   Tensor block(const Params& p, const std::string& name, const Tensor& x);
//   auto f = remat([&](const Tensor& x) { return block(params, "block3", x); });
//   Tensor y = f(x);     // the value of block(params, "block3", x)
//
// Promises:
//  - remat(fn) returns a callable with fn's signature: its arguments are pytrees of Tensors
//    (core/trace/control_flow.h: a Tensor, a std::vector<Tensor>, a TensorDict, pairs and
//    tuples of them) and its result is fn's result, a Tensor or such a pytree. The value is
//    fn's; fn is traced once per call, into a sub-graph of a `remat` op.
//  - In reverse mode, fn's forward pass is recomputed from its arguments (and the values it
//    captures) when the backward pass reaches it, instead of keeping fn's intermediate values
//    alive from the forward pass to the backward pass: both the forward call and the
//    recomputation with its VJP run as one instruction each, whose intermediates live only
//    while it runs. What stays alive between the passes is what fn reads (its arguments and
//    captures) and what it returns. The compiler cannot merge the recomputation with the
//    forward pass (hash-consing does not see into the op's sub-graph).
//  - Values fn captures from the enclosing trace (parameters captured by a lambda) get
//    gradients, as its arguments do (unlike custom_vjp's captures). A check inside fn is
//    checked in the forward call only; the recomputation does not raise it again.
//  - The gradient equals the one without remat: the recomputation runs the same ops on the
//    same values (the sub-plans may fuse differently from an inlined graph, so f32 results
//    may differ in the last bits; f64 and unfused plans agree).
//  - Misuse (no argument, an argument of another trace) is a TraceError naming remat and the
//    call site.
#pragma once

#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/trace/control_flow.h"

namespace fjit {
namespace detail {

// fn takes the leaves of the arguments and returns the result leaves; returns the op's
// results. `site`, when given, is the op's site instead of `loc` (a VJP's remat names the
// forward one).
std::vector<Tensor> remat_leaves(const LeafFn& fn, const std::vector<Tensor>& args, const Loc& loc,
                                 const Site* site = nullptr);

}  // namespace detail

template <class F>
auto remat(F fn, Loc loc = Loc::current()) {
  return [fn = std::move(fn), loc](const auto&... args) {
    static_assert(sizeof...(args) > 0, "remat: the function needs at least one argument");
    using Out = std::decay_t<std::invoke_result_t<const F&, decltype(args)...>>;
    const std::tuple<decltype(args)...> like(args...);
    std::vector<Tensor> leaves;
    (detail::flatten(args, leaves), ...);
    std::optional<Out> out_like;
    auto f = [&](const std::vector<Tensor>& l) {
      Out r = detail::call_unflattened(fn, like, l, std::index_sequence_for<decltype(args)...>{});
      std::vector<Tensor> out = detail::leaves_of(r);
      if (!out_like) out_like.emplace(std::move(r));
      return out;
    };
    const std::vector<Tensor> outs = detail::remat_leaves(f, leaves, loc);
    size_t p = 0;
    return detail::unflatten(*out_like, outs, p);
  };
}

}  // namespace fjit
