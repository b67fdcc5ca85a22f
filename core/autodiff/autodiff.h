// Reverse-mode automatic differentiation over the trace being recorded.
//
//   auto step = jit([](const Params& p, const Tensor& x, const Tensor& y) {
//     auto [loss, g] = value_and_grad(loss_fn)(p, x, y);   // g: same names as p
//     return std::tuple{sgd(p, g, 0.1), loss};
//   });
//
// grad(f) calls f on the traced arguments (recording its forward graph in the current trace),
// then appends the gradient graph: one VJP rule per op (core/autodiff_rules*.cc), each written
// with the public Tensor ops, so the gradient is an ordinary graph that the passes optimize
// and the compiler plans like any other. Nothing runs at trace time.
//
// Contracts:
//  - f returns a floating-point scalar (rank 0); anything else is a TraceError naming f's
//    output type and the call site of grad(). Differentiated arguments must be floating-point
//    Tensors or TensorDicts of them (an integer or bool leaf is a TraceError naming it).
//  - The gradient has the argument's structure: a Tensor for a Tensor, a TensorDict with the
//    same names in the same order for a TensorDict.
//  - A differentiated leaf that never reaches the output through differentiable ops gets a
//    zero gradient and is reported by name (its dict key and the jit argument path, e.g.
//    "'w3' (arg0.w3)"): a warning through fjit::log() and TraceContext::warnings, or a
//    TraceError in strict mode (the trace's TraceOptions::strict_unused, which jit and pmap set
//    from set_strict_unused_parameters() or FJIT_STRICT_UNUSED=1).
//  - Arguments are independent variables: the walk stops at them, even when one argument was
//    computed from another before f was called. Two arguments that are the same traced value
//    (hash-consing makes f(p, p) one node) each receive the total gradient.
//  - Inside pmap, collectives differentiate the sum over replicas of every replica's output
//    (psum's cotangent is the psum of the cotangents, as in JAX's pmap). Differentiating
//    pmean(loss) thus gives each replica its local gradient, like differentiating loss:
//    average gradients across replicas with pmean(g, axis).
//  - Non-smooth points: relu'(0) = 0, abs'(0) = 0; maximum/minimum split the cotangent equally
//    between tied operands, and reduce max/min split it equally among the tied elements (so the
//    gradient summed over a tie is exact, and a two-way tie matches central differences).
//    gather clamps out-of-range indices but scatter_add drops them, so gradients through an
//    out-of-range index are not defined.
#pragma once

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/trace/ops.h"
#include "core/trace/dict.h"

namespace fjit {

// The cotangents of `y` with respect to each of `wrt`, given the cotangent `seed` of y (same
// type as y). Works on the current trace's graph: only nodes on a path from some wrt to y are
// visited. A wrt that y does not depend on gets zeros (and is reported as unused, see above).
std::vector<Tensor> vjp(const Tensor& y, const std::vector<Tensor>& wrt, const Tensor& seed,
                        Loc loc = Loc::current());

// One VJP rule: given the forward node's inputs, its output and the output's cotangent,
// returns one cotangent per input (undefined = no gradient flows there). `need[i]` says
// whether input i's cotangent is wanted at all, so rules skip work nobody uses (the data
// input of the first matmul of a network, for instance).
struct VjpArgs {
  const Node& node;                 // the forward node (a copy: the graph grows meanwhile)
  const std::vector<Tensor>& ins;   // its inputs
  const Tensor& out;                // its value
  const Tensor& ct;                 // the cotangent of `out`, same type
  const std::vector<bool>& need;
  // Control-flow ops (several results): the cotangent of each result, undefined where none
  // flows; `ct` is then undefined.
  const std::vector<Tensor>* cts = nullptr;
};
using VjpRule = std::vector<Tensor> (*)(const VjpArgs& a);
// The rule for `op`, or nullptr when op_is_differentiable(op) is false.
VjpRule vjp_rule(Op op);

namespace autodiff {
// Internal, shared by the rule files (core/autodiff/rules_*.cc).
// Sums a broadcast cotangent back to `shape`: over the leading axes and the axes where
// `shape` has extent 1, then reshapes. (Rules copy shapes before building ops: a Tensor's
// shape() refers into the graph's node list, which building ops may reallocate.)
Tensor unbroadcast(const Tensor& ct, Shape shape);
// The rules: rule_<vjp> for every row of core/ir/ops.def (declared from the table, so a row
// whose rule is not defined fails to link). rule_none, for rows without one, is never called.
#define FJIT_OP(name, str, kind, arity, dtype, vjp, ...) std::vector<Tensor> rule_##vjp(const VjpArgs& a);
#include "core/ir/ops.def"
#undef FJIT_OP
}  // namespace autodiff

// Which arguments to differentiate: value_and_grad(f, argnums<0, 2>).
template <size_t... I>
struct ArgNums {};
template <size_t... I>
inline constexpr ArgNums<I...> argnums{};

namespace detail {

// Differentiated leaves of one call, flattened, with names for messages.
struct WrtLeaves {
  std::vector<Tensor> tensors;
  std::vector<std::string> names;  // "arg1" or "arg0.w1"-style keys, for messages
};

// The cotangents of `wrt` given cotangents `seeds` of several outputs `ys` (for control-flow
// VJPs). Leaves that no output depends on get zeros, silently.
std::vector<Tensor> vjp_many(const std::vector<Tensor>& ys, const std::vector<Tensor>& seeds,
                             const std::vector<Tensor>& wrt, const Loc& loc);

// vjp with names for the leaves, used by grad(); checks the output and leaf types.
std::vector<Tensor> vjp_named(const Tensor& y, const WrtLeaves& wrt, const Tensor& seed,
                              const char* api, const Loc& loc);
// The loss of f: requires a floating-point rank-0 Tensor.
void require_scalar_loss(const Tensor& y, const char* api, const Loc& loc);

inline void flatten_wrt(const Tensor& t, const std::string& name, WrtLeaves& w) {
  w.tensors.push_back(t);
  w.names.push_back(name);
}
inline void flatten_wrt(const TensorDict& d, const std::string& name, WrtLeaves& w) {
  for (const auto& [k, v] : d) {
    w.tensors.push_back(v);
    w.names.push_back(k);
  }
}
inline Tensor unflatten_grad(const Tensor&, const std::vector<Tensor>& g, size_t& pos) {
  return g[pos++];
}
inline TensorDict unflatten_grad(const TensorDict& d, const std::vector<Tensor>& g, size_t& pos) {
  TensorDict out;
  for (const auto& kv : d) out.set(kv.first, g[pos++]);
  return out;
}

template <class T>
using GradOf = decltype(unflatten_grad(std::declval<const T&>(), std::declval<const std::vector<Tensor>&>(),
                                       std::declval<size_t&>()));

// Runs f, splits off the aux value when HasAux, differentiates w.r.t. the chosen arguments.
// Returns {loss, grads, aux} where grads is the bare gradient for one argnum, else a tuple.
template <bool HasAux, size_t... I, class F, class... A>
auto value_grad_aux(const F& f, const Loc& loc, const A&... args) {
  auto all = std::forward_as_tuple(args...);
  static_assert(((I < sizeof...(A)) && ...), "argnums: index out of range");
  auto result = f(args...);
  Tensor loss;
  if constexpr (HasAux) loss = std::get<0>(result);
  else loss = result;
  require_scalar_loss(loss, HasAux ? "value_and_grad_aux" : "value_and_grad", loc);
  WrtLeaves wrt;
  (flatten_wrt(std::get<I>(all), "arg" + std::to_string(I), wrt), ...);
  std::vector<Tensor> g = vjp_named(loss, wrt, ones_like(loss, loc), "grad", loc);
  size_t pos = 0;
  // Braced initialisation evaluates left to right, in the flattening order.
  auto grads = std::tuple<GradOf<std::decay_t<std::tuple_element_t<I, std::tuple<A...>>>>...>{
      unflatten_grad(std::get<I>(all), g, pos)...};
  auto bare = [&] {
    if constexpr (sizeof...(I) == 1) return std::get<0>(std::move(grads));
    else return std::move(grads);
  };
  if constexpr (HasAux) return std::tuple{loss, bare(), std::get<1>(std::move(result))};
  else return std::tuple{loss, bare()};
}

}  // namespace detail

// value_and_grad(f)(args...) -> std::tuple{loss, grad of argument 0}.
// value_and_grad(f, argnums<i, j>)(args...) -> std::tuple{loss, std::tuple{grad i, grad j}}
// (a single argnum gives the bare gradient).
template <class F, size_t... I>
auto value_and_grad(F f, ArgNums<I...>, Loc loc = Loc::current()) {
  return [f = std::move(f), loc](const auto&... args) {
    return detail::value_grad_aux<false, I...>(f, loc, args...);
  };
}
template <class F>
auto value_and_grad(F f, Loc loc = Loc::current()) {
  return value_and_grad(std::move(f), argnums<0>, loc);
}

// grad(f)(args...) -> the gradient alone (structure as for value_and_grad).
template <class F, size_t... I>
auto grad(F f, ArgNums<I...>, Loc loc = Loc::current()) {
  return [f = std::move(f), loc](const auto&... args) {
    return std::get<1>(detail::value_grad_aux<false, I...>(f, loc, args...));
  };
}
template <class F>
auto grad(F f, Loc loc = Loc::current()) {
  return grad(std::move(f), argnums<0>, loc);
}

// For f returning std::tuple{loss, aux} (aux: any value, passed through untouched):
// value_and_grad_aux(f)(args...) -> std::tuple{loss, grad, aux}.
template <class F, size_t... I>
auto value_and_grad_aux(F f, ArgNums<I...>, Loc loc = Loc::current()) {
  return [f = std::move(f), loc](const auto&... args) {
    return detail::value_grad_aux<true, I...>(f, loc, args...);
  };
}
template <class F>
auto value_and_grad_aux(F f, Loc loc = Loc::current()) {
  return value_and_grad_aux(std::move(f), argnums<0>, loc);
}

}  // namespace fjit
