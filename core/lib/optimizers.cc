// Plain SGD, global norms and clipping. The optimizers are declared in optimizers.h, their
// state handled by optimizer.cc.
#include "core/lib/optimizers.h"

namespace fjit {

TensorDict sgd(const TensorDict& params, const TensorDict& grads, Scalar lr, Loc loc) {
  TensorDict out;
  for (const auto& [name, p] : params)
    out.set(name, sub(p, mul(lr.as(p.dtype(), loc),
                             optimizer_detail::gradient("sgd", grads, name, p, loc), loc), loc));
  return out;
}

Tensor global_norm(const TensorDict& xs, Loc loc) {
  if (xs.empty()) detail::fail("global_norm", {}, "needs at least one tensor", &loc);
  bool all_f64 = true;
  for (const auto& kv : xs) all_f64 = all_f64 && kv.second.dtype() == DType::f64;
  const DType acc = all_f64 ? DType::f64 : DType::f32;
  Tensor total;
  for (const auto& [name, x] : xs) {
    if (!is_floating(x.dtype()))
      detail::fail("global_norm", {x}, "entry '" + name + "' is not floating-point", &loc);
    Tensor s = cast(sum(square(x, loc), {}, false, loc), acc, loc);
    total = total.defined() ? add(total, s, loc) : s;
  }
  return sqrt(total, loc);
}

TensorDict clip_by_global_norm(const TensorDict& grads, Scalar max_norm, Tensor* norm_out, Loc loc) {
  Tensor norm = global_norm(grads, loc);
  if (norm_out) *norm_out = norm;
  Tensor limit = max_norm.as(norm.dtype(), loc);
  // The denominator is never below the limit, so the untaken branch cannot divide by zero.
  Tensor scale = where(gt(norm, limit, loc), div(limit, maximum(norm, limit, loc), loc),
                       ones_like(norm, loc), loc);
  TensorDict out;
  for (const auto& [name, g] : grads) out.set(name, mul(g, cast(scale, g.dtype(), loc), loc));
  return out;
}

}  // namespace fjit
