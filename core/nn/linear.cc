// The linear layer and the MLP (see core/nn/linear.h).
#include "core/nn/linear.h"

#include <stdexcept>

namespace fjit {
namespace {

// x @ w + b over the last axis of x, for a rank-2 w.
Tensor affine(const char* name, const Tensor& x, const Tensor& w, const Tensor& b, const Loc& loc) {
  detail::CompositeScope scope(name, {x, w, b});
  if (!x.defined() || x.rank() < 1)
    detail::fail(name, {x}, "expects an operand of rank >= 1", &loc);
  // b undefined: no bias.
  auto product = [&](const Tensor& rows) {
    Tensor y = matmul(rows, w, false, false, loc);
    return b.defined() ? add(y, b, loc) : y;
  };
  if (x.rank() == 2) return product(x);
  const Shape s = x.shape();
  Tensor y = product(reshape(x, {-1, s.back()}, loc));
  Shape out(s.begin(), s.end() - 1);
  out.push_back(w.rank() == 2 ? w.shape()[1] : -1);
  return reshape(y, out, loc);
}

}  // namespace

Tensor linear(const Params& p, const std::string& name, const Tensor& x, Loc loc) {
  return affine("linear", x, p[name + "/w"], p[name + "/b"], loc);
}

Tensor linear(const Params& p, const std::string& name, const Tensor& x, bool bias, Loc loc) {
  return affine("linear", x, p[name + "/w"], bias ? p[name + "/b"] : Tensor(), loc);
}

void linear_params(ArrayDict& d, const std::string& name, int64_t in, int64_t out, uint64_t seed,
                   Init init, DType dtype, bool bias) {
  if (in < 1 || out < 1)
    throw std::invalid_argument("linear_params: '" + name + "' needs positive sizes");
  d.set(name + "/w", initial_array(init, {in, out}, seed, dtype));
  if (bias) d.set(name + "/b", zeros({out}, dtype));
}

Tensor mlp(const Params& p, const Tensor& x, const MlpOptions& o, Loc loc) {
  int64_t layers = 0;
  while (p.contains(o.prefix + "w" + std::to_string(layers + 1))) ++layers;
  if (layers == 0)
    detail::fail("mlp", {x}, "no parameter '" + o.prefix + "w1' (see mlp_params)", &loc);
  Tensor h = x;
  for (int64_t k = 1; k <= layers; ++k) {
    const std::string index = std::to_string(k);
    h = affine("mlp", h, p[o.prefix + "w" + index], p[o.prefix + "b" + index], loc);
    if (k < layers) h = o.activation(h);
  }
  return h;
}

}  // namespace fjit
