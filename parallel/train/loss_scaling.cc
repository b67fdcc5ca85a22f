#include "parallel/train/loss_scaling.h"

#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "checks/check.h"
#include "core/runtime/jit_core.h"
#include "core/trace/collectives.h"
#include "core/trace/ops.h"

namespace fjit::training {
namespace {

// "w1, b1, w2, ..." (the first 16), with braces doubled for the check's format.
std::string listed_names(const TensorDict& grads) {
  std::string s;
  for (size_t i = 0; i < grads.size() && i < 16; ++i) s += (i ? ", " : "") + fmt::format("{}: {}", i, grads.name(i));
  if (grads.size() > 16) s += ", ...";
  std::string escaped;
  for (char c : s) {
    escaped += c;
    if (c == '{' || c == '}') escaped += c;
  }
  return escaped;
}

}  // namespace

TensorDict averaged_unscaled_gradients(const TensorDict& grads, const Tensor& scale, DType grad_dtype,
                                       const std::string& axis) {
  if (grad_dtype != DType::f32 && grad_dtype != DType::f16)
    throw TraceError(fmt::format("fjit: loss scaling: gradients are carried in f32 or f16, not {}",
                                 dtype_name(grad_dtype)));
  const Tensor inv = 1.0 / scale;
  TensorDict mean;
  if (grad_dtype == DType::f32) {
    mean = pmean(grads, axis);
  } else {
    TensorDict half;
    for (const auto& [name, g] : grads) half.set(name, cast(g * detail::mean_scale(g.dtype()), DType::f16));
    for (const auto& [name, h] : psum(half, axis)) mean.set(name, cast(h, DType::f32));
  }
  TensorDict out;
  std::vector<Tensor> bad;
  for (const auto& [name, g] : mean) {
    Tensor u = g * inv;
    bad.push_back(reshape(cast(!all(isfinite(u)), DType::i32), {1}));
    out.set(name, u);
  }
  if (bad.empty()) return out;
  const Tensor flags = bad.size() == 1 ? bad[0] : concat(bad, 0);
  const Tensor count = sum(flags);
  check_of_kind(CheckKind::loss_scale_overflow, count < 1.0,
                fmt::format("loss scale overflow: {{}} of {} parameters have non-finite gradients at "
                            "loss scale {{}}; the first is parameter {{}} of [{}]",
                            grads.size(), listed_names(grads)),
                count, scale, argmax(flags, 0));
  return out;
}

void require_loss_scaling_checks(std::optional<CheckMode>& checks, std::optional<CheckPolicy>& policy,
                                 const char* who) {
  if (checks.value_or(default_check_mode()) == CheckMode::off)
    throw std::invalid_argument(fmt::format("{}: loss scaling needs checks (an overflow is a check), not checks off", who));
  if (!policy) policy = CheckPolicy::skip_step;
  if (*policy != CheckPolicy::skip_step)
    throw std::invalid_argument(fmt::format("{}: loss scaling needs the skip_step check policy (an overflow "
                                            "skips the step), not {}", who, check_policy_name(*policy)));
}

DynamicLossScale make_loss_scale(const std::string& loss_scale, int64_t growth_interval, const char* who) {
  LossScaleOptions o;
  if (!loss_scale.empty() && !parse_loss_scale(loss_scale, &o))
    throw std::invalid_argument(fmt::format("{}: loss scale '{}' is neither dynamic nor a positive number",
                                            who, loss_scale));
  o.growth_interval = growth_interval;
  return DynamicLossScale(o);
}

}  // namespace fjit::training
