// vmap: a function of one example made a function of a batch, as jax.vmap.
//
//   auto per_example_grads = vmap(grad(loss), {kUnbatched, 0, 0});
//   TensorDict g = per_example_grads(params, x, y);   // each leaf [B, ...param shape]
//
// vmap(f, in_axes, out_axes)(args...) traces f once on one example (the argument types with
// their batch axis removed) and replays what it recorded with each op's batching rule (the
// batch column of core/ir/ops.def, core/autodiff/batching.h), so the batch is computed by
// batched ops (one GEMM over the batch's rows, reductions over shifted axes, ...), not by a
// loop. It composes with grad, jit, pmap and itself (nested vmap: the inner batch axis is
// axis 0 of what the inner vmap returns, inside the outer example).
//
// Contracts:
//  - in_axes: one entry per argument, the batch axis of that argument (of every leaf of a
//    TensorDict), or kUnbatched for an argument every example shares; a single entry applies
//    to every argument; empty means 0 for every argument. At least one argument is batched and
//    every batched leaf has the same extent B along its axis, else a TraceError names the
//    leaves, their types and vmap's call site.
//  - f returns a Tensor, a TensorDict, a std::vector<Tensor>, or a std::tuple / std::pair of
//    those. out_axes: one entry per element of a tuple result (or one for any result, or empty
//    for 0): where each result's batch axis goes. A result that depends on no batched value is
//    broadcast along the batch, unless its out_axis is kUnbatched, which in turn requires a
//    result that does not depend on the batch (else a TraceError).
//  - Values are those of a loop over the examples calling f on each, bit for bit for ops whose
//    batched kernel sums in the example's order; a product whose rows join one GEMM, and
//    reductions, may round differently (tests/vmap_test.cc states the tolerances).
//  - Random numbers follow JAX: an unbatched key gives the same draw to every example, a
//    batched key (u32[B, 2]) gives each example the draw of its own key.
//  - check() inside f passes when it holds for every example; a failure reports the values
//    of the first failing example and, after its message, "(vmap batch element i)".
//  - A cond whose predicate is batched runs both branches on the batch and selects each
//    example's result by its predicate, as JAX does (so a check or collective in either
//    branch runs for every example); a cond whose predicate is shared stays one cond of
//    batched branches. A scan or fori_loop is one loop over the batched body. A while_loop
//    whose predicate is shared is one loop of the batched body; one whose predicate is batched
//    runs while any example's holds, each iteration keeping the carry of the examples already
//    finished (their body's checks pass), as JAX does. custom_vjp and remat with a batched
//    operand run as one op per example, whose results are stacked: correct, but its cost
//    grows with B ops.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

// An argument or result without a batch axis (JAX's None).
inline constexpr int kUnbatched = -1;

namespace detail {

struct VmapLeaf {
  Tensor t;
  int axis = 0;       // kUnbatched: shared by every example
  std::string name;   // "arg1" or "arg0.w1", for messages
};
using VmapFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& leaves)>;

// Traces fn on one example of `leaves` and batches it; returns each result with its batch
// axis at out_axes[k] (kUnbatched: not batched). out_axes_of is called once fn has run, with
// the number of results.
std::vector<Tensor> vmap_flat(const VmapFn& fn, const std::vector<VmapLeaf>& leaves,
                              const std::function<std::vector<int>(size_t)>& out_axes_of,
                              const Loc& loc);

inline int axis_for(const std::vector<int>& axes, size_t k, const char* what, const Loc& loc) {
  if (axes.empty()) return 0;
  if (axes.size() == 1) return axes[0];
  if (k >= axes.size())
    throw TraceError("fjit: vmap: " + std::string(what) + " has " + std::to_string(axes.size()) +
                     " entries, fewer than the function's " + what + " (at " + call_site(&loc) + ")");
  return axes[k];
}

inline void vmap_in(const Tensor& t, int axis, const std::string& name, std::vector<VmapLeaf>& out) {
  out.push_back({t, axis, name});
}
inline void vmap_in(const TensorDict& d, int axis, const std::string& name, std::vector<VmapLeaf>& out) {
  for (const auto& [k, v] : d) out.push_back({v, axis, name + "." + k});
}
inline Tensor vmap_rebuild(const Tensor&, const std::vector<Tensor>& v, size_t& pos) { return v[pos++]; }
inline TensorDict vmap_rebuild(const TensorDict& d, const std::vector<Tensor>& v, size_t& pos) {
  TensorDict out;
  for (const auto& kv : d) out.set(kv.first, v[pos++]);
  return out;
}
inline std::vector<Tensor> vmap_rebuild(const std::vector<Tensor>& d, const std::vector<Tensor>& v, size_t& pos) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < d.size(); ++i) out.push_back(v[pos++]);
  return out;
}
template <class... R>
std::tuple<R...> vmap_rebuild(const std::tuple<R...>& t, const std::vector<Tensor>& v, size_t& pos) {
  return std::apply([&](const auto&... e) { return std::tuple<R...>{vmap_rebuild(e, v, pos)...}; }, t);
}
template <class A, class B>
std::pair<A, B> vmap_rebuild(const std::pair<A, B>& p, const std::vector<Tensor>& v, size_t& pos) {
  A first = vmap_rebuild(p.first, v, pos);
  return {first, vmap_rebuild(p.second, v, pos)};
}

// Flattens a result into leaves, recording which top-level element each leaf belongs to.
inline void vmap_out(const Tensor& t, size_t group, std::vector<Tensor>& v, std::vector<size_t>& g) {
  v.push_back(t);
  g.push_back(group);
}
inline void vmap_out(const TensorDict& d, size_t group, std::vector<Tensor>& v, std::vector<size_t>& g) {
  for (const auto& kv : d) vmap_out(kv.second, group, v, g);
}
inline void vmap_out(const std::vector<Tensor>& d, size_t group, std::vector<Tensor>& v, std::vector<size_t>& g) {
  for (const Tensor& t : d) vmap_out(t, group, v, g);
}
template <class... R>
void vmap_out_top(const std::tuple<R...>& t, std::vector<Tensor>& v, std::vector<size_t>& g) {
  size_t k = 0;
  std::apply([&](const auto&... e) { (vmap_out(e, k++, v, g), ...); }, t);
}
template <class A, class B>
void vmap_out_top(const std::pair<A, B>& p, std::vector<Tensor>& v, std::vector<size_t>& g) {
  vmap_out(p.first, 0, v, g);
  vmap_out(p.second, 1, v, g);
}
template <class R>
void vmap_out_top(const R& r, std::vector<Tensor>& v, std::vector<size_t>& g) {
  vmap_out(r, 0, v, g);
}

}  // namespace detail

// vmap(f, in_axes, out_axes)(args...): see above. Arguments are Tensors or TensorDicts.
template <class F>
auto vmap(F f, std::vector<int> in_axes = {}, std::vector<int> out_axes = {}, Loc loc = Loc::current()) {
  return [f = std::move(f), in_axes = std::move(in_axes), out_axes = std::move(out_axes), loc](const auto&... args) {
    using R = std::decay_t<decltype(f(args...))>;
    std::vector<detail::VmapLeaf> leaves;
    size_t k = 0;
    ((detail::vmap_in(args, detail::axis_for(in_axes, k, "in_axes", loc), "arg" + std::to_string(k), leaves), ++k), ...);
    std::optional<R> shape;
    std::vector<size_t> groups;
    auto fn = [&](const std::vector<Tensor>& ts) {
      size_t pos = 0;
      // Braced initialisation evaluates left to right, in the flattening order.
      auto rebuilt = std::tuple<std::decay_t<decltype(args)>...>{detail::vmap_rebuild(args, ts, pos)...};
      shape.emplace(std::apply(f, rebuilt));
      std::vector<Tensor> outs;
      groups.clear();
      detail::vmap_out_top(*shape, outs, groups);
      return outs;
    };
    auto axes_of = [&](size_t n) {
      std::vector<int> axes;
      for (size_t i = 0; i < n; ++i) axes.push_back(detail::axis_for(out_axes, groups[i], "out_axes", loc));
      return axes;
    };
    std::vector<Tensor> outs = detail::vmap_flat(fn, leaves, axes_of, loc);
    size_t pos = 0;
    return detail::vmap_rebuild(*shape, outs, pos);
  };
}

}  // namespace fjit
