// AdamW on a tensor-parallel mesh (see parallel/train/tensor_parallel_update.h).
#include "parallel/train/tensor_parallel_update.h"

#include <algorithm>

#include "checks/check.h"
#include "core/trace/collectives.h"

namespace fjit::training {

Tensor tp_global_norm(const TensorDict& grads, const ShardSpec& spec, const std::string& axis, Loc loc) {
  if (grads.empty()) detail::fail("tp_global_norm", {}, "needs at least one gradient", &loc);
  bool all_f64 = true;
  for (const auto& kv : grads) all_f64 = all_f64 && kv.second.dtype() == DType::f64;
  const DType acc = all_f64 ? DType::f64 : DType::f32;
  Tensor split, whole;
  for (const auto& [name, g] : grads) {
    if (!is_floating(g.dtype()))
      detail::fail("tp_global_norm", {g}, "entry '" + name + "' is not floating-point", &loc);
    const PartSpec& parts = spec.leaf(name);
    const bool is_split = std::find(parts.begin(), parts.end(), axis) != parts.end();
    Tensor s = cast(sum(square(g, loc), {}, false, loc), acc, loc);
    Tensor& total = is_split ? split : whole;
    total = total.defined() ? add(total, s, loc) : s;
  }
  if (split.defined()) split = psum(split, axis, loc);
  Tensor total = !split.defined() ? whole : !whole.defined() ? split : add(whole, split, loc);
  return sqrt(total, loc);
}

std::tuple<TensorDict, TensorDict, Tensor> tp_adamw_update_of_mean(
    const Params& params, const TensorDict& mean_grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, double clip_norm, const ShardSpec& spec,
    const std::string& axis, const std::vector<ParamGroup>& groups, const std::vector<std::string>* pattern_names) {
  const Tensor norm = tp_global_norm(mean_grads, spec, axis);
  check(isfinite(norm) && norm < max_grad_norm, "global gradient norm {} is not finite or not below {}", norm,
        scalar(norm.dtype(), max_grad_norm));
  TensorDict clipped = mean_grads;
  if (clip_norm > 0) {
    // clip_by_global_norm's scale (core/lib/optimizers.h) from the mesh-wide norm.
    const Tensor limit = scalar(norm.dtype(), clip_norm);
    const Tensor scale = where(gt(norm, limit), div(limit, maximum(norm, limit)), ones_like(norm));
    clipped = TensorDict();
    for (const auto& [name, g] : mean_grads) clipped.set(name, mul(g, cast(scale, g.dtype())));
  }
  AdamW opt = optimizer;
  opt.lr = schedule(step);
  auto [next_params, next_state] = grouped_update(opt, groups, params, clipped, state, pattern_names);
  return {next_params, next_state, norm};
}

}  // namespace fjit::training
