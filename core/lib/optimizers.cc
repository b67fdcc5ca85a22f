#include "core/lib/optimizers.h"

#include "core/ir/array.h"

namespace fjit {
namespace {

const Tensor& entry(const char* api, const TensorDict& d, const std::string& name,
                    const char* what, const Loc& loc) {
  if (!d.contains(name))
    detail::fail(api, {}, std::string(what) + " has no entry '" + name +
                 "' (state comes from init_state/init of the same optimizer and parameters)", &loc);
  return d.at(name);
}

const Tensor& grad_of(const char* api, const TensorDict& grads, const std::string& name,
                      const Tensor& p, const Loc& loc) {
  const Tensor& g = entry(api, grads, name, "the gradient dict", loc);
  if (g.dtype() != p.dtype() || g.shape() != p.shape())
    detail::fail(api, {p, g}, "gradient '" + name + "' does not match its parameter", &loc);
  return g;
}

ArrayDict zeros_state(const ArrayDict& params, bool second_moment, bool step) {
  ArrayDict s;
  for (const auto& [k, v] : params) s.set("m." + k, Array::zeros(v.dtype(), v.shape()));
  if (second_moment)
    for (const auto& [k, v] : params) s.set("v." + k, Array::zeros(v.dtype(), v.shape()));
  if (step) s.set("step", Array::scalar<int32_t>(0));
  return s;
}

TensorDict traced_zeros_state(const TensorDict& params, bool second_moment, bool step) {
  TensorDict s;
  for (const auto& [k, v] : params) s.set("m." + k, zeros_like(v));
  if (second_moment)
    for (const auto& [k, v] : params) s.set("v." + k, zeros_like(v));
  if (step) s.set("step", scalar(DType::i32, 0));
  return s;
}

// The Adam family's shared step. `decoupled` selects AdamW's decay of the parameter itself
// over Adam's L2 term added to the gradient.
OptimizerUpdate adam_update(const char* api, const Scalar& lr, double b1, double b2, double eps,
                            double weight_decay, bool decoupled, const TensorDict& params,
                            const TensorDict& grads, const TensorDict& state) {
  const Loc loc = Loc::current();
  const Tensor& step = entry(api, state, "step", "the optimizer state", loc);
  if (step.dtype() != DType::i32 || step.rank() != 0)
    detail::fail(api, {step}, "state 'step' must be an i32 scalar", &loc);
  Tensor t_next = step + 1.0;
  // The bias corrections in float64 whatever the parameters' dtype, rounded once: in f32,
  // b2^t for t in the thousands loses most of 1 - b2^t's digits.
  const Tensor t64 = cast(t_next, DType::f64);
  const Tensor bc1 = 1.0 - pow(scalar(DType::f64, b1), t64);
  const Tensor bc2 = 1.0 - pow(scalar(DType::f64, b2), t64);
  TensorDict new_params, new_state;
  for (const auto& [name, p] : params) {
    const Tensor& g0 = grad_of(api, grads, name, p, loc);
    const Tensor& m = entry(api, state, "m." + name, "the optimizer state", loc);
    const Tensor& v = entry(api, state, "v." + name, "the optimizer state", loc);
    const DType dt = p.dtype();
    // Per-dtype scalars; hash-consing shares them between parameters of one dtype.
    Tensor lr_t = lr.as(dt);
    Tensor step_size = cast(lr.as(DType::f64) / bc1, dt);
    Tensor inv_sqrt_bc2 = cast(rsqrt(bc2), dt);

    Tensor g = g0, base = p;
    if (weight_decay != 0.0) {
      if (decoupled) base = p * (1.0 - lr_t * weight_decay);
      else g = g + p * weight_decay;
    }
    Tensor m2 = m * b1 + g * (1.0 - b1);
    Tensor v2 = v * b2 + square(g) * (1.0 - b2);
    Tensor denom = sqrt(v2) * inv_sqrt_bc2 + eps;
    new_params.set(name, base - step_size * (m2 / denom));
    new_state.set("m." + name, m2);
    new_state.set("v." + name, v2);
  }
  // Keep init_state's order: m.*, v.*, step.
  TensorDict ordered;
  for (const auto& [name, p] : params) ordered.set("m." + name, new_state.at("m." + name));
  for (const auto& [name, p] : params) ordered.set("v." + name, new_state.at("v." + name));
  ordered.set("step", t_next);
  return {new_params, ordered};
}

}  // namespace

Tensor Scalar::as(DType dtype, Loc loc) const {
  if (!tensor_.defined()) return scalar(dtype, value_, loc);
  if (tensor_.rank() != 0) detail::fail("optimizer", {tensor_}, "a hyper-parameter Tensor must be a scalar", &loc);
  return cast(tensor_, dtype, loc);
}

ArrayDict SGD::init_state(const ArrayDict& params) const {
  return momentum != 0.0 ? zeros_state(params, false, false) : ArrayDict{};
}
TensorDict SGD::init(const TensorDict& params) const {
  return momentum != 0.0 ? traced_zeros_state(params, false, false) : TensorDict{};
}

OptimizerUpdate SGD::update(const TensorDict& params, const TensorDict& grads,
                            const TensorDict& state) const {
  const Loc loc = Loc::current();
  if (nesterov && momentum <= 0.0)
    detail::fail("SGD", {}, "nesterov momentum requires momentum > 0", &loc);
  TensorDict new_params, new_state;
  for (const auto& [name, p] : params) {
    Tensor g = grad_of("SGD", grads, name, p, loc);
    if (weight_decay != 0.0) g = g + p * weight_decay;
    if (momentum != 0.0) {
      const Tensor& buf = entry("SGD", state, "m." + name, "the optimizer state", loc);
      Tensor buf2 = buf * momentum + g;
      new_state.set("m." + name, buf2);
      g = nesterov ? g + buf2 * momentum : buf2;
    }
    new_params.set(name, p - lr.as(p.dtype()) * g);
  }
  return {new_params, new_state};
}

ArrayDict Adam::init_state(const ArrayDict& params) const { return zeros_state(params, true, true); }
TensorDict Adam::init(const TensorDict& params) const { return traced_zeros_state(params, true, true); }
OptimizerUpdate Adam::update(const TensorDict& params, const TensorDict& grads,
                             const TensorDict& state) const {
  return adam_update("Adam", lr, b1, b2, eps, weight_decay, false, params, grads, state);
}

ArrayDict AdamW::init_state(const ArrayDict& params) const { return zeros_state(params, true, true); }
TensorDict AdamW::init(const TensorDict& params) const { return traced_zeros_state(params, true, true); }
OptimizerUpdate AdamW::update(const TensorDict& params, const TensorDict& grads,
                              const TensorDict& state) const {
  return adam_update("AdamW", lr, b1, b2, eps, weight_decay, true, params, grads, state);
}

TensorDict sgd(const TensorDict& params, const TensorDict& grads, Scalar lr, Loc loc) {
  TensorDict out;
  for (const auto& [name, p] : params)
    out.set(name, sub(p, mul(lr.as(p.dtype(), loc), grad_of("sgd", grads, name, p, loc), loc), loc));
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
