// The linear layer and the MLP (see core/nn/linear.h).
#include "core/nn/linear.h"

#include <stdexcept>

#include <fmt/format.h>

#include "core/nn/precision.h"

namespace fjit {
namespace {

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

// The dtype a layer computes in: its activations' (f32 when they are not floating: the op
// that receives them then reports it).
DType compute_dtype(const Tensor& x) {
  return x.defined() && is_floating(x.dtype()) ? x.dtype() : DType::f32;
}

// A LoRA adapter's entries in the compute dtype; undefined a when the layer has none.
struct Lora {
  Tensor a, b, scale;
};

Lora read_lora(const Params& p, const std::string& name, const Tensor& x, const Tensor& w,
               const Loc& loc) {
  if (!p.contains(name + "/lora_a")) return {};
  for (const char* part : {"lora_b", "lora_scale"})
    if (!p.contains(name + "/" + part))
      detail::fail("linear", {x, w},
                   fmt::format("layer '{}' has a LoRA adapter ('{}/lora_a') but no '{}/{}'", name,
                               name, name, part),
                   &loc);
  const DType dt = compute_dtype(x);
  auto read = [&](const char* part) {
    const Tensor& t = p[name + "/" + part];
    const bool convert = t.defined() && t.dtype() != dt && (is_floating(t.dtype()) || is_half(t.dtype()));
    return convert ? cast(t, dt, loc) : t;
  };
  Lora l{read("lora_a"), read("lora_b"), read("lora_scale")};
  const bool fits = w.defined() && w.rank() == 2 && l.a.defined() && l.a.rank() == 2 &&
                    l.b.defined() && l.b.rank() == 2 && l.scale.defined() && l.scale.rank() == 0 &&
                    l.a.dim(0) == w.dim(0) && l.a.dim(1) == l.b.dim(0) && l.b.dim(1) == w.dim(1);
  if (!fits)
    detail::fail("linear", {w, l.a, l.b, l.scale},
                 fmt::format("layer '{}': a LoRA adapter of w [in, out] is lora_a [in, r], "
                             "lora_b [r, out] and a scalar lora_scale",
                             name),
                 &loc);
  return l;
}

// x @ w + b (+ the adapter) over the last axis of x, for a rank-2 w.
Tensor affine(const char* name, const Tensor& x, const Tensor& w, const Tensor& b,
              const Lora& lora, const Loc& loc) {
  detail::CompositeScope scope(name, {x, w, b});
  if (!x.defined() || x.rank() < 1)
    detail::fail(name, {x}, "expects an operand of rank >= 1", &loc);
  // b undefined: no bias. The products run on the rows of x as a matrix; the bias and the
  // adapter are added in x's own shape, so that elementwise fusion joins those adds to the
  // ops that read the result (an activation, a residual add) across no reshape.
  const Shape s = x.shape();
  const Tensor rows = x.rank() == 2 ? x : reshape(x, {-1, s.back()}, loc);
  Shape out(s.begin(), s.end() - 1);
  out.push_back(w.rank() == 2 ? w.shape()[1] : -1);
  auto shaped = [&](const Tensor& y) { return x.rank() == 2 ? y : reshape(y, out, loc); };
  Tensor y = shaped(policy_matmul(rows, w, false, false, loc));
  if (b.defined()) y = add(y, b, loc);
  if (lora.a.defined()) {
    Tensor low = policy_matmul(policy_matmul(rows, lora.a, false, false, loc), lora.b, false, false, loc);
    y = add(y, mul(shaped(low), lora.scale, loc), loc);
  }
  return y;
}

Tensor linear_layer(const Params& p, const std::string& name, const Tensor& x, bool bias,
                    const Loc& loc) {
  const DType dt = compute_dtype(x);
  const Tensor w = weight(p, name + "/w", dt, loc);
  const Tensor b = bias ? weight(p, name + "/b", dt, loc) : Tensor();
  return affine("linear", x, w, b, read_lora(p, name, x, w, loc), loc);
}

}  // namespace

Tensor weight(const Params& p, const std::string& name, DType compute, Loc loc) {
  const Tensor& t = p[name];
  return t.defined() && is_half(t.dtype()) ? cast(t, compute, loc) : t;
}

Tensor linear(const Params& p, const std::string& name, const Tensor& x, Loc loc) {
  return linear_layer(p, name, x, true, loc);
}

Tensor linear(const Params& p, const std::string& name, const Tensor& x, bool bias, Loc loc) {
  return linear_layer(p, name, x, bias, loc);
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
    const DType dt = compute_dtype(h);
    h = affine("mlp", h, weight(p, o.prefix + "w" + index, dt, loc),
               weight(p, o.prefix + "b" + index, dt, loc), Lora{}, loc);
    if (k < layers) h = o.activation(h);
  }
  return h;
}

}  // namespace fjit
