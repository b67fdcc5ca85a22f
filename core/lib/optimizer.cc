// The shared state handling of elementwise optimizers (optimizer.h): names, checks, the step
// counter and the moments' dicts, written once for every optimizer.
#include "core/lib/optimizer.h"

#include <cstdio>

#include "core/ir/array.h"

namespace fjit {
namespace optimizer_detail {

namespace {

const char* const kMomentNames[] = {"m.", "v."};

const Tensor& entry(const char* api, const TensorDict& d, const std::string& name,
                    const char* what, const Loc& loc) {
  if (!d.contains(name))
    detail::fail(api, {}, std::string(what) + " has no entry '" + name +
                 "' (state comes from init_state/init of the same optimizer and parameters)", &loc);
  return d.at(name);
}

}  // namespace

const Tensor& gradient(const char* api, const TensorDict& grads, const std::string& name,
                       const Tensor& p, const Loc& loc) {
  const Tensor& g = entry(api, grads, name, "the gradient dict", loc);
  if (g.dtype() != p.dtype() || g.shape() != p.shape())
    detail::fail(api, {p, g}, "gradient '" + name + "' does not match its parameter", &loc);
  return g;
}

ArrayDict init_state(const StateLayout& layout, const ArrayDict& params) {
  ArrayDict s;
  for (int k = 0; k < layout.moments; ++k)
    for (const auto& [name, p] : params) s.set(kMomentNames[k] + name, Array::zeros(p.dtype(), p.shape()));
  if (layout.counts_steps) s.set("step", Array::scalar<int32_t>(0));
  return s;
}

TensorDict init(const StateLayout& layout, const TensorDict& params) {
  TensorDict s;
  for (int k = 0; k < layout.moments; ++k)
    for (const auto& [name, p] : params) s.set(kMomentNames[k] + name, zeros_like(p));
  if (layout.counts_steps) s.set("step", scalar(DType::i32, 0));
  return s;
}

OptimizerUpdate update(const char* api, const StateLayout& layout, const TensorDict& params,
                       const TensorDict& grads, const TensorDict& state,
                       const std::function<void(Element<Tensor>&)>& element) {
  use_compiled_programs();
  const Loc loc = Loc::current();
  Tensor t_next, t64;
  if (layout.counts_steps) {
    const Tensor& step = entry(api, state, "step", "the optimizer state", loc);
    if (step.dtype() != DType::i32 || step.rank() != 0)
      detail::fail(api, {step}, "state 'step' must be an i32 scalar", &loc);
    t_next = step + 1.0;
    t64 = cast(t_next, DType::f64);
  }
  TensorDict new_params;
  std::vector<TensorDict> moments(layout.moments);
  for (const auto& [name, p] : params) {
    Element<Tensor> x{.p = p, .g = gradient(api, grads, name, p, loc), .step = t64,
                      .dtype = p.dtype(), .api = api, .loc = loc};
    if (layout.moments > 0) x.m = entry(api, state, kMomentNames[0] + name, "the optimizer state", loc);
    if (layout.moments > 1) x.v = entry(api, state, kMomentNames[1] + name, "the optimizer state", loc);
    element(x);
    new_params.set(name, x.p);
    if (layout.moments > 0) moments[0].set(kMomentNames[0] + name, x.m);
    if (layout.moments > 1) moments[1].set(kMomentNames[1] + name, x.v);
  }
  // init_state's order: m.*, v.*, step.
  TensorDict new_state;
  for (const TensorDict& d : moments)
    for (const auto& [name, t] : d) new_state.set(name, t);
  if (layout.counts_steps) new_state.set("step", t_next);
  return {new_params, new_state};
}

}  // namespace optimizer_detail

void Element<Tensor>::fail(const char* what) const { detail::fail(api, {}, what, &loc); }

Tensor Scalar::as(DType dtype, Loc loc) const {
  if (!tensor_.defined()) return scalar(dtype, value_, loc);
  if (tensor_.rank() != 0) detail::fail("optimizer", {tensor_}, "a hyper-parameter Tensor must be a scalar", &loc);
  return cast(tensor_, dtype, loc);
}

std::string describe(const char* name, const Hyperparameters& hyperparameters) {
  std::string s = std::string(name) + "(";
  for (size_t i = 0; i < hyperparameters.size(); ++i) {
    const auto& [key, value] = hyperparameters[i];
    char number[32];
    std::snprintf(number, sizeof number, "%g", value.value());
    s += (i ? ", " : "") + key + "=" + (value.is_tensor() ? std::string("traced") : number);
  }
  return s + ")";
}

}  // namespace fjit
