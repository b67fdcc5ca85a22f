// Jacobians and Hessians from the two modes (JAX's jacfwd, jacrev, hessian, and the
// Hessian-vector product):
//
//   Tensor J = jacfwd(f)(x);        // f: Tensor -> Tensor; J: f(x).shape ++ x.shape
//   Tensor J = jacrev(f)(x);        // the same, from reverse mode
//   Tensor H = hessian(loss)(x);    // loss: Tensor -> scalar; H: x.shape ++ x.shape
//   auto hv = hvp(loss)(params, v); // H v for a Tensor or a TensorDict of parameters
//
// Promises:
//  - jacfwd builds one forward-mode walk (core/autodiff/jvp.h) per element of x, with the
//    basis vector as the tangent, over f traced once (linearize); jacrev one reverse-mode walk
//    per element of f(x), with the basis vector as the cotangent. Both give
//    J[i..., j...] = d f(x)[i...] / d x[j...], equal up to rounding; each walk is an ordinary
//    sub-graph, so the graph grows with the number of walks: use jacfwd when x is smaller than
//    f(x), jacrev otherwise, and neither on large tensors.
//  - hessian(f) = jacfwd(grad(f)): forward over reverse. hvp(f)(x, v) = jvp(grad(f), x, v)'s
//    tangent: one forward walk over the gradient graph, costing a small multiple of a gradient
//    whatever x's size; x and v are a Tensor or a TensorDict of the same names and types. It
//    goes through scan and fori_loop (the VJP's scan is differentiated forward) and through
//    cond and remat; not through custom_vjp (core/autodiff/jvp.h).
//  - x (and v) must be floating-point; f(x) must be floating-point for jacrev, a floating-point
//    scalar for hessian and hvp. Misuse is a TraceError naming the function and call site.
#pragma once

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
// The reverse-mode Jacobian of y (already traced from x) with respect to x.
Tensor jacobian_rev(const Tensor& y, const Tensor& x, const Loc& loc);
void require_jacobian_operand(const Tensor& x, const char* api, const Loc& loc);

}  // namespace detail

template <class F>
auto jacfwd(F f, Loc loc = Loc::current()) {
  return [f = std::move(f), loc](const Tensor& x) {
    detail::require_jacobian_operand(x, "jacfwd", loc);
    auto [y, f_jvp] = linearize(f, x);
    const Shape xs = x.shape(), ys = y.shape();
    std::vector<Tensor> cols;
    for (int64_t j = 0; j < x.size(); ++j) cols.push_back(f_jvp(detail::basis_vector(x.dtype(), xs, j)));
    return detail::stack_jacobian(cols, ys, xs, true);
  };
}

template <class F>
auto jacrev(F f, Loc loc = Loc::current()) {
  return [f = std::move(f), loc](const Tensor& x) {
    detail::require_jacobian_operand(x, "jacrev", loc);
    const Tensor y = f(x);
    return detail::jacobian_rev(y, x, loc);
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
