// Jacobians and Hessians from the two modes (JAX's jacfwd, jacrev, hessian, and the
// Hessian-vector product):
//
//   Tensor J = jacfwd(f)(x);        // f: Tensor -> Tensor; J: f(x).shape ++ x.shape
//   Tensor J = jacrev(f)(x);        // the same, from reverse mode
//   Tensor H = hessian(loss)(x);    // loss: Tensor -> scalar; H: x.shape ++ x.shape
//   TensorDict J = jacrev(f)(params);              // f: TensorDict -> Tensor: J[name]
//   Dict<TensorDict> H = hessian(loss)(params);    // H[a][b]: a.shape ++ b.shape
//   auto hv = hvp(loss)(params, v); // H v for a Tensor or a TensorDict of parameters
//
// Promises:
//  - x is a pytree of floating-point Tensors (a Tensor, a TensorDict, a std::vector<Tensor>,
//    pairs and tuples, as grad and jvp take); f(x) is a Tensor or a TensorDict of them. The
//    result has f(x)'s structure whose leaves have x's structure (JAX's nesting): a Tensor for
//    Tensor -> Tensor, x's structure for a Tensor result, a Dict of x's structures for a
//    TensorDict result; each leaf d f(x)[i...] / d x[j...] of shape f(x)_leaf ++ x_leaf.
//  - jacfwd traces f once (linearize) and computes every column at once: one vmap of the
//    forward-mode map over the identity basis of all of x's elements (core/autodiff/vmap.h),
//    so its cost is a batched JVP, not one walk per element. jacrev likewise vmaps the
//    reverse-mode map over the identity basis of f(x)'s elements. Both equal the per-element
//    walks (detail::jacfwd_per_element, detail::jacobian_rev) up to rounding: use jacfwd when
//    x is smaller than f(x), jacrev otherwise; the basis is an n x n identity, so neither suits
//    large tensors.
//  - hessian(f) = jacfwd(grad(f)): forward over reverse. hvp(f)(x, v) = jvp(grad(f), x, v)'s
//    tangent: one forward walk over the gradient graph, costing a small multiple of a gradient
//    whatever x's size; x and v are a Tensor or a TensorDict of the same names and types. It
//    goes through scan and fori_loop (the VJP's scan is differentiated forward) and through
//    cond and remat; not through custom_vjp (core/autodiff/jvp.h).
//  - x's leaves (and v) must be floating-point; f(x)'s leaves must be floating-point for
//    jacrev, a floating-point scalar for hessian and hvp. Misuse is a TraceError naming the
//    function and call site.
#pragma once

#include <functional>
#include <vector>

#include "core/autodiff/autodiff.h"
#include "core/autodiff/jvp.h"

namespace fjit {
namespace detail {

// Row `i` of the identity of order `n` (dtype `t`), reshaped to `shape`.
Tensor basis_vector(DType t, const Shape& shape, int64_t i);
// Stacks the walks' results (each of `each`'s shape) into `lead` ++ `each` (jacrev: one per
// output element) or `each` ++ `lead` (jacfwd: one per input element, so the last axes).
Tensor stack_jacobian(const std::vector<Tensor>& parts, const Shape& out_shape, const Shape& in_shape,
                      bool parts_are_columns);
// The reverse-mode Jacobian of y (already traced from x) with respect to x, one reverse walk
// per element of y.
Tensor jacobian_rev(const Tensor& y, const Tensor& x, const Loc& loc);
void require_jacobian_operand(const Tensor& x, const char* api, const Loc& loc);
void require_jacobian_operands(const std::vector<Tensor>& xs, const char* api, const Loc& loc);

// A linear map of leaves: input tangents to output tangents (forward), or output cotangents
// to input cotangents (reverse).
using LinearLeaves = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
// The Jacobian's blocks, block i * xs.size() + j = d ys[i] / d xs[j] of shape
// ys[i].shape ++ xs[j].shape, from one vmap of `linear` over the identity basis of xs'
// elements (forward) or of ys' elements (reverse). `api` names the caller in errors.
std::vector<Tensor> jacobian_blocks(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                                    const LinearLeaves& linear, bool forward, const char* api,
                                    const Loc& loc);

// The blocks arranged as f(x)'s structure of x's structures (blocks in jacobian_blocks' order).
template <class X>
X jacobian_tree(const Tensor&, const X& x, const std::vector<Tensor>& blocks, size_t& p) {
  return unflatten(x, blocks, p);
}
template <class X>
Dict<X> jacobian_tree(const TensorDict& y, const X& x, const std::vector<Tensor>& blocks, size_t& p) {
  Dict<X> out;
  for (const auto& kv : y) out.set(kv.first, unflatten(x, blocks, p));
  return out;
}

// jacfwd of a Tensor function, one forward walk per element of x (the reference the batched
// jacfwd is tested against).
template <class F>
Tensor jacfwd_per_element(const F& f, const Tensor& x, const Loc& loc) {
  require_jacobian_operand(x, "jacfwd", loc);
  auto [y, f_jvp] = linearize(f, x);
  const Shape xs = x.shape(), ys = y.shape();
  std::vector<Tensor> cols;
  for (int64_t j = 0; j < x.size(); ++j) cols.push_back(f_jvp(basis_vector(x.dtype(), xs, j)));
  return stack_jacobian(cols, ys, xs, true);
}

}  // namespace detail

template <class F>
auto jacfwd(F f, Loc loc = Loc::current()) {
  return [f = std::move(f), loc](const auto& x) {
    using X = std::decay_t<decltype(x)>;
    const std::vector<Tensor> xs = detail::leaves_of(x);
    detail::require_jacobian_operands(xs, "jacfwd", loc);
    auto [y, f_jvp] = linearize(f, x);
    auto tangent_map = [&x, &f_jvp](const std::vector<Tensor>& t) {
      size_t p = 0;
      const X tx = detail::unflatten(x, t, p);
      return detail::leaves_of(f_jvp(tx));
    };
    const std::vector<Tensor> blocks = detail::jacobian_blocks(detail::leaves_of(y), xs, tangent_map, true, "jacfwd", loc);
    size_t p = 0;
    return detail::jacobian_tree(y, x, blocks, p);
  };
}

template <class F>
auto jacrev(F f, Loc loc = Loc::current()) {
  return [f = std::move(f), loc](const auto& x) {
    const std::vector<Tensor> xs = detail::leaves_of(x);
    detail::require_jacobian_operands(xs, "jacrev", loc);
    const auto y = f(x);
    const std::vector<Tensor> ys = detail::leaves_of(y);
    auto cotangent_map = [&](const std::vector<Tensor>& cts) { return detail::vjp_many(ys, cts, xs, loc); };
    const std::vector<Tensor> blocks = detail::jacobian_blocks(ys, xs, cotangent_map, false, "jacrev", loc);
    size_t p = 0;
    return detail::jacobian_tree(y, x, blocks, p);
  };
}

template <class F>
auto hessian(F f, Loc loc = Loc::current()) {
  return jacfwd(grad(std::move(f), loc), loc);
}

// hvp(f)(x, v) -> H(x) v, the Hessian of the scalar f at x applied to v (x's structure).
template <class F>
auto hvp(F f, Loc loc = Loc::current()) {
  return [f = std::move(f), loc](const auto& x, const auto& v) {
    return jvp(grad(f, loc), x, v, loc).second;
  };
}

}  // namespace fjit
