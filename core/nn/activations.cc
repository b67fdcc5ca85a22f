// Activations built from ops (see core/nn/activations.h).
#include "core/nn/activations.h"

#include <cmath>

namespace fjit {

Tensor gelu(const Tensor& x, bool approximate, Loc loc) {
  detail::CompositeScope scope("gelu", {x});
  if (!x.defined() || !is_floating(x.dtype()))
    detail::fail("gelu", {x}, "expects a floating-point operand", &loc);
  const DType t = x.dtype();
  if (approximate) {
    const double c = std::sqrt(2.0 / M_PI);
    Tensor inner = mul(add(x, mul(mul(mul(x, x, loc), x, loc), scalar(t, 0.044715, loc), loc), loc),
                       scalar(t, c, loc), loc);
    return mul(mul(x, scalar(t, 0.5, loc), loc), add(tanh(inner, loc), scalar(t, 1.0, loc), loc), loc);
  }
  // One op (core/trace/ops.h): the same value as x * 0.5 * (erf(x / sqrt 2) + 1) in these
  // ops, and a backward pass of one op, not of the dozen the composite's rules make.
  return gelu_exact(x, loc);
}

Tensor silu(const Tensor& x, Loc loc) {
  detail::CompositeScope scope("silu", {x});
  if (!x.defined() || !is_floating(x.dtype()))
    detail::fail("silu", {x}, "expects a floating-point operand", &loc);
  return mul(x, sigmoid(x, loc), loc);
}

Tensor log_softmax(const Tensor& x, int64_t axis, Loc loc) {
  detail::CompositeScope scope("log_softmax", {x});
  if (!x.defined() || !is_floating(x.dtype()))
    detail::fail("log_softmax", {x}, "expects floating-point logits", &loc);
  Tensor shifted = sub(x, max(x, {axis}, true, loc), loc);
  return sub(shifted, log(sum(exp(shifted, loc), {axis}, true, loc), loc), loc);
}

Tensor softmax(const Tensor& x, int64_t axis, Loc loc) {
  detail::CompositeScope scope("softmax", {x});
  if (!x.defined() || !is_floating(x.dtype()))
    detail::fail("softmax", {x}, "expects floating-point logits", &loc);
  Tensor e = exp(sub(x, max(x, {axis}, true, loc), loc), loc);
  return div(e, sum(e, {axis}, true, loc), loc);
}

}  // namespace fjit
