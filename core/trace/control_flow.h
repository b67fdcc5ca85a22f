// Control flow traced once: scan, fori_loop, while_loop, cond, and custom_vjp (JAX's lax.scan,
// lax.fori_loop, lax.while_loop, lax.cond and jax.custom_vjp). remat (jax.checkpoint) is in
// core/trace/remat.h.
//
//   auto [h, ys] = scan([&](const Tensor& h, const Tensor& x) {
//     Tensor next = tanh(matmul(h, w) + x);
//     return std::pair{next, sum(next)};
//   }, h0, xs);                                   // xs [T, ...]: one row per iteration
//   Tensor s = fori_loop(0, 100, [](const Tensor& i, const Tensor& s) { return s * 0.5; }, s0);
//   Tensor y = cond(x_norm > 1.0, [](const Tensor& x) { return x / 2.0; },
//                   [](const Tensor& x) { return x; }, x);
//   auto [n, steps] = while_loop([](const auto& c) { return c.first > 1.0; },
//                                [](const auto& c) { return std::pair{collatz(c.first), c.second + 1}; },
//                                std::pair{n0, zero});
//
// Promises:
//  - Each body or branch is traced once into a sub-graph of the node it makes; the plan runs
//    it as a loop or a branch, so trace time, compile time and plan size do not grow with the
//    trip count. Values the functions capture from the enclosing trace (a lambda's captures)
//    are passed in; what inside does not depend on the carries, rows or operands is computed
//    once, outside (a check among it is checked once).
//  - Carries, rows, ys and operands are pytrees of Tensors: a Tensor, a std::vector<Tensor>,
//    a TensorDict, or a std::pair / std::tuple of pytrees (dict order and vector lengths are
//    part of the structure).
//  - scan(body, init, xs): body(carry, x) returns std::pair{new carry, y} (or a tuple), where
//    x has each leaf of xs without its leading axis. Returns std::pair{final carry, ys} with ys
//    stacked along a new leading axis of the trip count. Every leaf of xs must have the same
//    leading extent; the new carry must have the carry's structure and types.
//  - fori_loop(lo, hi, body, init): body(i, carry) -> carry for i = lo .. hi-1 (i an i32
//    scalar); hi <= lo returns init.
//  - while_loop(cond_fn, body_fn, init): cond_fn(carry) returns a bool scalar Tensor;
//    body_fn(carry) returns the next carry, of the carry's structure and types; the result is
//    the first carry for which cond_fn is false (init when it is false at once). The trip
//    count is decided at run time: one compiled plan runs any number of iterations. Forward
//    only: differentiating through a while_loop is a TraceError naming it and its call site
//    (use scan or fori_loop for a loop of known length).
//  - cond(pred, true_fn, false_fn, operands...): pred a bool scalar; both functions take the
//    operands and return results of equal structure and types; only the taken one runs.
//  - custom_vjp(fwd, bwd)(args...): args are Tensors; fwd(args...) returns std::pair{out,
//    residuals}; the forward value is out, and its VJP is bwd(residuals, cotangent of out),
//    which returns one cotangent per argument (a Tensor for one argument, else a
//    std::vector<Tensor>). Differentiating never looks inside fwd. Values fwd or bwd capture
//    get no gradient.
//  - All of them but while_loop are differentiable in reverse mode: a scan's VJP is a scan
//    over the reversed rows running the body's VJP on the carries the forward loop kept; a
//    cond's is a cond.
//  - A check inside a scan, fori_loop or while_loop body (or while_loop's cond_fn) reports the
//    iteration that raised it.
//  - Misuse (xs of different leading extents, a carry whose type changes, branches of
//    different types, a non-bool predicate or cond_fn result, bwd returning the wrong types) is
//    a TraceError naming the op, the shapes and the call site.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {
namespace detail {

// Pytrees of Tensors: flatten to leaves, rebuild from leaves in the structure of `like`.
inline void flatten(const Tensor& t, std::vector<Tensor>& out) { out.push_back(t); }
inline void flatten(const std::vector<Tensor>& v, std::vector<Tensor>& out) {
  out.insert(out.end(), v.begin(), v.end());
}
inline void flatten(const TensorDict& d, std::vector<Tensor>& out) {
  for (const auto& kv : d) out.push_back(kv.second);
}
inline Tensor unflatten(const Tensor&, const std::vector<Tensor>& l, size_t& p) { return l.at(p++); }
inline std::vector<Tensor> unflatten(const std::vector<Tensor>& like, const std::vector<Tensor>& l, size_t& p) {
  std::vector<Tensor> v;
  for (size_t i = 0; i < like.size(); ++i) v.push_back(l.at(p++));
  return v;
}
inline TensorDict unflatten(const TensorDict& like, const std::vector<Tensor>& l, size_t& p) {
  TensorDict d;
  for (const auto& kv : like) d.set(kv.first, l.at(p++));
  return d;
}
// Pairs and tuples of pytrees are pytrees.
template <class A, class B> void flatten(const std::pair<A, B>& t, std::vector<Tensor>& out);
template <class... T> void flatten(const std::tuple<T...>& t, std::vector<Tensor>& out);
template <class A, class B>
std::pair<A, B> unflatten(const std::pair<A, B>& like, const std::vector<Tensor>& l, size_t& p);
template <class... T>
std::tuple<T...> unflatten(const std::tuple<T...>& like, const std::vector<Tensor>& l, size_t& p);

template <class A, class B> void flatten(const std::pair<A, B>& t, std::vector<Tensor>& out) {
  flatten(t.first, out);
  flatten(t.second, out);
}
template <class... T> void flatten(const std::tuple<T...>& t, std::vector<Tensor>& out) {
  std::apply([&out](const auto&... e) { (flatten(e, out), ...); }, t);
}
template <class A, class B>
std::pair<A, B> unflatten(const std::pair<A, B>& like, const std::vector<Tensor>& l, size_t& p) {
  A a = unflatten(like.first, l, p);
  B b = unflatten(like.second, l, p);
  return {std::move(a), std::move(b)};
}
template <class... T>
std::tuple<T...> unflatten(const std::tuple<T...>& like, const std::vector<Tensor>& l, size_t& p) {
  // Braced initialisation evaluates left to right, in the flattening order.
  return std::apply([&](const auto&... e) { return std::tuple<T...>{unflatten(e, l, p)...}; }, like);
}

template <class T>
std::vector<Tensor> leaves_of(const T& t) {
  std::vector<Tensor> v;
  flatten(t, v);
  return v;
}

struct ScanStep {
  std::vector<Tensor> carry, ys;
};
using ScanBody = std::function<ScanStep(const std::vector<Tensor>& carry, const std::vector<Tensor>& x)>;
using LeafFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
struct ScanLeaves {
  std::vector<Tensor> carry, ys;
};

// The leaf-level builders the templates below call. `api` names the op in errors and reports.
// `reverse` runs the rows from last to first (ys keep their rows); `site`, when given, is the
// loop's site in check reports instead of `loc` (a VJP's loop reports its forward loop).
ScanLeaves scan_leaves(const char* api, const ScanBody& body, const std::vector<Tensor>& init,
                       const std::vector<Tensor>& xs, const Loc& loc, bool reverse = false,
                       const Site* site = nullptr);
// cond_fn returns one bool scalar leaf; body_fn the carry's leaves.
// max_trips: the trip limit (0: none; negative: the trace's default, TraceOptions).
std::vector<Tensor> while_loop_leaves(const LeafFn& cond_fn, const LeafFn& body_fn,
                                      const std::vector<Tensor>& init, const Loc& loc,
                                      int64_t max_trips = -1);
std::vector<Tensor> cond_leaves(const Tensor& pred, const LeafFn& true_fn, const LeafFn& false_fn,
                                const std::vector<Tensor>& operands, const Loc& loc);
// fwd returns [out..., residuals...] and sets *num_out; bwd takes [residuals..., cts of out...].
std::vector<Tensor> custom_vjp_leaves(const std::function<std::vector<Tensor>(const std::vector<Tensor>&, size_t*)>& fwd,
                                      const LeafFn& bwd, const std::vector<Tensor>& args, const Loc& loc);

// cond's predicate, implicitly made from a Tensor: its defaulted source_location is evaluated
// at the caller of cond() (a variadic function cannot take a defaulted Loc last).
struct CondPred {
  CondPred(const Tensor& t, Loc l = Loc::current()) : pred(t), loc(l) {}  // NOLINT: implicit
  Tensor pred;
  Loc loc;
};

template <class F, class... A, size_t... I>
auto call_unflattened(F& f, const std::tuple<const A&...>& like, const std::vector<Tensor>& leaves,
                      std::index_sequence<I...>) {
  size_t p = 0;
  // Braced initialisation evaluates left to right, in the flattening order.
  std::tuple<std::decay_t<A>...> args{unflatten(std::get<I>(like), leaves, p)...};
  return std::apply(f, args);
}

}  // namespace detail

template <class F, class C, class X>
auto scan(F body, const C& init, const X& xs, Loc loc = Loc::current()) {
  using R = std::invoke_result_t<F&, const C&, const X&>;
  using Y = std::decay_t<std::tuple_element_t<1, R>>;
  std::optional<Y> y_like;
  auto leaves = detail::scan_leaves(
      "scan",
      [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        size_t pc = 0, px = 0;
        const C carry = detail::unflatten(init, c, pc);
        const X row = detail::unflatten(xs, x, px);
        R r = body(carry, row);
        y_like.emplace(std::get<1>(r));
        return detail::ScanStep{detail::leaves_of(std::get<0>(r)), detail::leaves_of(std::get<1>(r))};
      },
      detail::leaves_of(init), detail::leaves_of(xs), loc);
  size_t pc = 0, py = 0;
  C carry = detail::unflatten(init, leaves.carry, pc);
  Y ys = detail::unflatten(*y_like, leaves.ys, py);
  return std::pair<C, Y>{std::move(carry), std::move(ys)};
}

template <class F, class C>
C fori_loop(int64_t lo, int64_t hi, F body, const C& init, Loc loc = Loc::current()) {
  if (hi <= lo) return init;
  const Tensor is = add(iota(DType::i32, {hi - lo}, 0, loc), scalar(DType::i32, static_cast<double>(lo), loc), loc);
  auto leaves = detail::scan_leaves(
      "fori_loop",
      [&](const std::vector<Tensor>& c, const std::vector<Tensor>& x) {
        size_t pc = 0;
        return detail::ScanStep{detail::leaves_of(body(x[0], detail::unflatten(init, c, pc))), {}};
      },
      detail::leaves_of(init), {is}, loc);
  size_t pc = 0;
  return detail::unflatten(init, leaves.carry, pc);
}

// while_loop's guard against a loop that never ends. With checks on (JitOptions::checks),
// the loop stops after max_trips iterations (the carry is then the one body_fn returned last)
// and raises a check of kind loop_trip_limit naming the loop's call site, the iteration
// reached and how many carry values are not finite; under the throw or skip_step policy the
// step's outputs are discarded as for any check. 0: no limit; negative: the jit's or pmap's
// JitOptions::while_max_trips (FJIT_WHILE_MAX_TRIPS). With checks off there is no guard.
// The step's deadline (JitOptions::step_timeout_s, FJIT_STEP_TIMEOUT) stops it the same way,
// with a check of kind step_timeout.
struct WhileOptions {
  int64_t max_trips = -1;
};

template <class C, class B, class T>
T while_loop(C cond_fn, B body_fn, const T& init, WhileOptions options, Loc loc = Loc::current()) {
  auto c = [&](const std::vector<Tensor>& l) {
    size_t p = 0;
    const T carry = detail::unflatten(init, l, p);
    return std::vector<Tensor>{Tensor(cond_fn(carry))};
  };
  auto b = [&](const std::vector<Tensor>& l) {
    size_t p = 0;
    const T carry = detail::unflatten(init, l, p);
    return detail::leaves_of(T(body_fn(carry)));
  };
  const std::vector<Tensor> leaves =
      detail::while_loop_leaves(c, b, detail::leaves_of(init), loc, options.max_trips);
  size_t p = 0;
  return detail::unflatten(init, leaves, p);
}

template <class C, class B, class T>
T while_loop(C cond_fn, B body_fn, const T& init, Loc loc = Loc::current()) {
  return while_loop(std::move(cond_fn), std::move(body_fn), init, WhileOptions{}, loc);
}

template <class T, class F, class... A>
auto cond(detail::CondPred pred, T true_fn, F false_fn, const A&... operands) {
  using Out = std::decay_t<std::invoke_result_t<T&, const A&...>>;
  static_assert(sizeof...(A) > 0, "cond: give the branches at least one operand");
  const std::tuple<const A&...> like(operands...);
  std::vector<Tensor> leaves;
  (detail::flatten(operands, leaves), ...);
  std::optional<Out> out_like;
  auto branch = [&](auto& fn) {
    return [&](const std::vector<Tensor>& l) {
      auto r = detail::call_unflattened(fn, like, l, std::index_sequence_for<A...>{});
      if (!out_like) out_like.emplace(r);
      return detail::leaves_of(r);
    };
  };
  auto outs = detail::cond_leaves(pred.pred, branch(true_fn), branch(false_fn), leaves, pred.loc);
  size_t p = 0;
  return detail::unflatten(*out_like, outs, p);
}

template <class Fwd, class Bwd>
auto custom_vjp(Fwd fwd, Bwd bwd, Loc loc = Loc::current()) {
  return [fwd = std::move(fwd), bwd = std::move(bwd), loc](const auto&... args) {
    static_assert((std::is_same_v<std::decay_t<decltype(args)>, Tensor> && ...),
                  "custom_vjp: the arguments must be Tensors");
    using R = std::invoke_result_t<const Fwd&, decltype(args)...>;
    using Out = std::decay_t<std::tuple_element_t<0, R>>;
    using Res = std::decay_t<std::tuple_element_t<1, R>>;
    const std::tuple<decltype(args)...> like(args...);
    std::optional<Out> out_like;
    std::optional<Res> res_like;
    auto f = [&](const std::vector<Tensor>& l, size_t* num_out) {
      R r = detail::call_unflattened(fwd, like, l, std::index_sequence_for<decltype(args)...>{});
      out_like.emplace(std::get<0>(r));
      res_like.emplace(std::get<1>(r));
      std::vector<Tensor> leaves = detail::leaves_of(std::get<0>(r));
      *num_out = leaves.size();
      detail::flatten(std::get<1>(r), leaves);
      return leaves;
    };
    auto b = [&](const std::vector<Tensor>& l) {
      size_t p = 0;
      const Res res = detail::unflatten(*res_like, l, p);
      const Out ct = detail::unflatten(*out_like, l, p);
      return detail::leaves_of(bwd(res, ct));
    };
    auto outs = detail::custom_vjp_leaves(f, b, {args...}, loc);
    size_t p = 0;
    return detail::unflatten(*out_like, outs, p);
  };
}

}  // namespace fjit
