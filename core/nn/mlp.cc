// The transformer's MLPs (see core/nn/mlp.h).
#include "core/nn/mlp.h"

#include "core/nn/activations.h"
#include "core/nn/linear.h"

namespace fjit {
namespace {

void require_features(const char* layer, const Tensor& x, const Loc& loc) {
  if (!x.defined() || x.rank() < 1 || !is_floating(x.dtype()))
    detail::fail(layer, {x}, "expects a floating-point operand [..., features]", &loc);
}

}  // namespace

Tensor gelu_mlp(const Params& p, const std::string& name, const Tensor& x, Loc loc) {
  return gelu_mlp(p, name, x, false, loc);
}

Tensor gelu_mlp(const Params& p, const std::string& name, const Tensor& x, bool tanh_approximation,
                Loc loc) {
  detail::CompositeScope scope("gelu_mlp", {x});
  require_features("gelu_mlp", x, loc);
  return linear(p, name + "/proj", gelu(linear(p, name + "/fc", x, loc), tanh_approximation, loc), loc);
}

void gelu_mlp_params(ArrayDict& d, const std::string& name, int64_t dim, int64_t hidden,
                     uint64_t seed, Init init, DType dtype) {
  linear_params(d, name + "/fc", dim, hidden, seed, init, dtype);
  linear_params(d, name + "/proj", hidden, dim, seed + 1, init, dtype);
}

Tensor swiglu_mlp(const Params& p, const std::string& name, const Tensor& x, Loc loc) {
  detail::CompositeScope scope("swiglu_mlp", {x});
  require_features("swiglu_mlp", x, loc);
  Tensor gate = silu(linear(p, name + "/gate", x, false, loc), loc);
  return linear(p, name + "/down", mul(gate, linear(p, name + "/up", x, false, loc), loc), false, loc);
}

void swiglu_mlp_params(ArrayDict& d, const std::string& name, int64_t dim, int64_t hidden,
                       uint64_t seed, Init init, DType dtype) {
  linear_params(d, name + "/gate", dim, hidden, seed, init, dtype, false);
  linear_params(d, name + "/up", dim, hidden, seed + 1, init, dtype, false);
  linear_params(d, name + "/down", hidden, dim, seed + 2, init, dtype, false);
}

}  // namespace fjit
