// Normalization layers (see core/nn/normalization.h).
#include "core/nn/normalization.h"

#include "core/nn/linear.h"
#include "core/trace/collectives.h"

namespace fjit {
namespace {

void require_features(const char* name, const Tensor& x, const std::vector<Tensor>& per_feature,
                      const Loc& loc) {
  if (!x.defined() || x.rank() < 1 || !is_floating(x.dtype()))
    detail::fail(name, {x}, "expects a floating-point operand of rank >= 1", &loc);
  const Shape want{x.shape().back()};
  for (const Tensor& t : per_feature)
    if (!t.defined() || t.shape() != want || t.dtype() != x.dtype())
      detail::fail(name, {x, t}, "expects per-feature tensors of type " +
                   type_str(x.dtype(), want), &loc);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Loc loc) {
  detail::CompositeScope scope("layer_norm", {x, gamma, beta});
  require_features("layer_norm", x, {gamma, beta}, loc);
  Tensor mu = mean(x, {-1}, true, loc);
  Tensor centered = sub(x, mu, loc);
  Tensor var = mean(mul(centered, centered, loc), {-1}, true, loc);
  Tensor inv = rsqrt(add(var, scalar(x.dtype(), eps, loc), loc), loc);
  return add(mul(mul(centered, inv, loc), gamma, loc), beta, loc);
}

Tensor layer_norm(const Params& p, const std::string& name, const Tensor& x, double eps, Loc loc) {
  const DType dt = x.defined() && is_floating(x.dtype()) ? x.dtype() : DType::f32;
  return layer_norm(x, weight(p, name + "/g", dt, loc), weight(p, name + "/b", dt, loc), eps, loc);
}

void layer_norm_params(ArrayDict& d, const std::string& name, int64_t features, DType dtype) {
  d.set(name + "/g", Array::full(dtype, {features}, 1.0));
  d.set(name + "/b", Array::zeros(dtype, {features}));
}

Tensor rms_norm(const Params& p, const std::string& name, const Tensor& x, double eps, Loc loc) {
  const Tensor g = weight(p, name + "/g", x.defined() && is_floating(x.dtype()) ? x.dtype() : DType::f32, loc);
  detail::CompositeScope scope("rms_norm", {x, g});
  require_features("rms_norm", x, {g}, loc);
  Tensor ms = mean(mul(x, x, loc), {-1}, true, loc);
  return mul(mul(x, rsqrt(add(ms, scalar(x.dtype(), eps, loc), loc), loc), loc), g, loc);
}

void rms_norm_params(ArrayDict& d, const std::string& name, int64_t features, DType dtype) {
  d.set(name + "/g", Array::full(dtype, {features}, 1.0));
}

BatchNormResult batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           const Tensor& running_mean, const Tensor& running_var,
                           const BatchNormOptions& o, Loc loc) {
  detail::CompositeScope scope("batch_norm", {x, gamma, beta});
  require_features("batch_norm", x, {gamma, beta, running_mean, running_var}, loc);
  const DType t = x.dtype();
  Tensor eps = scalar(t, o.eps, loc);
  if (!o.training) {
    Tensor inv = rsqrt(add(running_var, eps, loc), loc);
    Tensor y = add(mul(mul(sub(x, running_mean, loc), inv, loc), gamma, loc), beta, loc);
    return {y, running_mean, running_var};
  }
  Axes batch_axes;
  for (int d = 0; d + 1 < x.rank(); ++d) batch_axes.push_back(d);
  auto batch_mean = [&](const Tensor& v) {
    Tensor m = batch_axes.empty() ? v : mean(v, batch_axes, false, loc);
    return o.axis_name.empty() ? m : pmean(m, o.axis_name, loc);
  };
  // Two passes (mean, then the mean square deviation from it): exact for any split of the
  // batch, and free of the cancellation in E[x^2] - E[x]^2.
  Tensor mu = batch_mean(x);
  Tensor centered = sub(x, mu, loc);
  Tensor var = batch_mean(mul(centered, centered, loc));
  Tensor y = add(mul(mul(centered, rsqrt(add(var, eps, loc), loc), loc), gamma, loc), beta, loc);
  Tensor m = scalar(t, o.momentum, loc), one_m = scalar(t, 1.0 - o.momentum, loc);
  Tensor new_mean = add(mul(running_mean, m, loc), mul(stop_gradient(mu, loc), one_m, loc), loc);
  Tensor new_var = add(mul(running_var, m, loc), mul(stop_gradient(var, loc), one_m, loc), loc);
  return {y, new_mean, new_var};
}

}  // namespace fjit
