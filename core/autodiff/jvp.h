// Forward-mode automatic differentiation over the trace being recorded: jvp and linearize
// (JAX's jax.jvp and jax.linearize).
//
//   auto [y, ty] = jvp(f, std::tuple{x, w}, std::tuple{tx, tw});   // ty = J_f(x, w) (tx, tw)
//   auto [y, ty] = jvp(f, x, tx);                                  // one argument
//   auto [y, f_jvp] = linearize(f, x);  Tensor t1 = f_jvp(tx1), t2 = f_jvp(tx2);
//
// jvp calls f on the primals (recording its forward graph in the current trace), then walks
// that graph forward from the primals, applying one JVP rule per op (core/autodiff/jvp_rules_*.cc,
// named by the jvp column of core/ir/ops.def): each rule builds its output's tangent with the
// public Tensor ops from its inputs' tangents, so the tangent is an ordinary graph that the
// passes optimize and the compiler plans like any other; reverse mode can differentiate it
// again (reverse over forward), and jvp of a gradient is forward-over-reverse
// (core/autodiff/jacobian.h: hessian, hvp).
//
// Contracts:
//  - Primals are floating-point Tensors or pytrees of them (core/trace/control_flow.h: a
//    TensorDict, a std::vector<Tensor>, pairs and tuples); each tangent has its primal's
//    structure, shapes and dtype. Anything else is a TraceError naming jvp and the call site.
//  - The result is std::pair{f's value, its tangent}, the tangent of f's result's structure.
//    A result leaf that no primal reaches through differentiable ops has a zero tangent; an
//    integer or bool result leaf has a zero tangent of its own dtype.
//  - As in grad, primals are independent variables: the walk starts at them, even when one
//    was computed from another before jvp was called.
//  - Non-smooth points follow the VJP rules (relu'(0) = 0, ties split equally), so that
//    <v, J t> = <J^T v, t> holds exactly in exact arithmetic.
//  - Control flow: a scan or fori_loop's tangent is a scan that carries the tangents beside
//    the primal carries; a cond's a cond on the same predicate; a while_loop's a while_loop
//    carrying the tangents (forward mode needs no stored carries, so while_loop, which reverse
//    mode refuses, is differentiable forward); remat's a remat.
//  - custom_vjp: like JAX, forward mode through a custom_vjp function is a TraceError naming
//    it and its call site: its rule is a VJP only, and differentiating fwd would silently
//    ignore it. Use reverse mode (grad, jacrev) for such functions.
//  - Fused attention has a forward-mode rule, its backward op none: forward over reverse
//    through dot_product_attention (hessian, hvp) is a TraceError naming it, as reverse over
//    reverse is.
#pragma once

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/trace/control_flow.h"
#include "core/trace/ops.h"

namespace fjit {

// One JVP rule: given the forward node, its inputs, its value and the tangent of each input
// (undefined = zero), returns the tangent of its value (one Tensor), or for a control-flow
// op the tangent of each of its results (undefined = zero).
struct JvpArgs {
  const Node& node;                  // the forward node (a copy: the graph grows meanwhile)
  const std::vector<Tensor>& ins;    // its inputs
  const Tensor& out;                 // its value (control flow: the placeholder)
  const std::vector<Tensor>& tans;   // the tangent of each input; undefined = zero
  // Control-flow ops: which results' tangents are read (a rule may leave the others
  // undefined, and skip their work); null: all.
  const std::vector<bool>* need = nullptr;
};
using JvpRule = std::vector<Tensor> (*)(const JvpArgs& a);
// The rule for `op`, or nullptr when op_has_jvp(op) is false.
JvpRule jvp_rule(Op op);

namespace autodiff {
// The rules: jvp_<jvp> for every row of core/ir/ops.def (declared from the table, so a row
// naming a rule nobody defines fails to link). jvp_none, for rows without one, is never called.
#define FJIT_OP(name, str, kind, arity, dtype, vjp, jvp, ...) std::vector<Tensor> jvp_##jvp(const JvpArgs& a);
#include "core/ir/ops.def"
#undef FJIT_OP
// The dtype of a value's tangent: a bf16 value's is f32 (as its cotangent), else its own.
DType tangent_dtype(DType t);
}  // namespace autodiff

namespace detail {

// The tangents of `ys` given tangents `txs` of the leaves `xs` (undefined = zero), over the
// current trace's graph. Every result is defined: zeros (of the tangent dtype) where no
// tangent reaches. `api` names the caller in errors.
std::vector<Tensor> jvp_leaves(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                               const std::vector<Tensor>& txs, const char* api, const Loc& loc);

// Checks primal and tangent leaves (equal counts, floating primals, tangents of the primal's
// type and of the active trace); throws a TraceError naming `api` and `loc`.
void check_jvp_leaves(const std::vector<Tensor>& xs, const std::vector<Tensor>& txs,
                      const char* api, const Loc& loc);

template <class T>
struct IsTuple : std::false_type {};
template <class... T>
struct IsTuple<std::tuple<T...>> : std::true_type {};

}  // namespace detail

// jvp(f, std::tuple{primals...}, std::tuple{tangents...}) -> std::pair{f(primals...), tangent}.
template <class F, class... A>
auto jvp(const F& f, const std::tuple<A...>& primals, const std::tuple<A...>& tangents,
         Loc loc = Loc::current()) {
  const std::vector<Tensor> xs = detail::leaves_of(primals), txs = detail::leaves_of(tangents);
  detail::check_jvp_leaves(xs, txs, "jvp", loc);
  auto out = std::apply(f, primals);
  const std::vector<Tensor> ty = detail::jvp_leaves(detail::leaves_of(out), xs, txs, "jvp", loc);
  size_t p = 0;
  auto tout = detail::unflatten(out, ty, p);
  return std::pair{std::move(out), std::move(tout)};
}

// jvp(f, primal, tangent) for a function of one argument (a Tensor or another pytree).
template <class F, class A>
  requires(!detail::IsTuple<A>::value)
auto jvp(const F& f, const A& primal, const A& tangent, Loc loc = Loc::current()) {
  return jvp([&f](const A& x) { return f(x); }, std::tuple<A>{primal}, std::tuple<A>{tangent}, loc);
}

// linearize(f, primals...) -> std::pair{f(primals...), f_jvp}: f is traced once; f_jvp(
// tangents...) (tangents of the primals' structures) returns the tangent of f's result, as
// jvp would, by another forward walk over the same graph. Call f_jvp in the same trace.
template <class F, class... A>
auto linearize(const F& f, const A&... primals) {
  const Loc loc = Loc::current();
  const std::vector<Tensor> xs = detail::leaves_of(std::tuple<const A&...>{primals...});
  detail::check_jvp_leaves(xs, xs, "linearize", loc);
  auto out = f(primals...);
  using R = decltype(out);
  std::function<R(const A&...)> f_jvp = [xs, out, loc](const A&... tangents) {
    const std::vector<Tensor> txs = detail::leaves_of(std::tuple<const A&...>{tangents...});
    detail::check_jvp_leaves(xs, txs, "linearize", loc);
    const std::vector<Tensor> ty = detail::jvp_leaves(detail::leaves_of(out), xs, txs, "linearize", loc);
    size_t p = 0;
    return detail::unflatten(out, ty, p);
  };
  return std::pair{std::move(out), std::move(f_jvp)};
}

}  // namespace fjit
