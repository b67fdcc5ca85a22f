// Multi-head self-attention (see core/nn/attention.h).
#include "core/nn/attention.h"

#include <cmath>

#include "core/nn/activations.h"
#include "core/nn/linear.h"

namespace fjit {

Tensor self_attention(const Params& p, const std::string& name, const Tensor& h,
                      const AttentionOptions& o, Loc loc) {
  detail::CompositeScope scope("self_attention", {h});
  if (!h.defined() || h.rank() != 3)
    detail::fail("self_attention", {h}, "expects a sequence [batch, tokens, features]", &loc);
  const int64_t b = h.dim(0), t = h.dim(1), d = h.dim(2), heads = o.heads;
  if (heads < 1 || d % heads != 0)
    detail::fail("self_attention", {h}, "heads (" + std::to_string(heads) +
                 ") must divide the features (" + std::to_string(d) + ")", &loc);
  const int64_t dh = d / heads;
  Tensor qkv = linear(p, name + "/qkv", reshape(h, {b * t, d}, loc), loc);  // [B*T, 3D]
  qkv = transpose(reshape(qkv, {b, t, 3, heads, dh}, loc), {2, 0, 3, 1, 4}, loc);  // [3,B,H,T,dh]
  auto part = [&](int64_t i) {
    return reshape(slice(qkv, {i, 0, 0, 0, 0}, {i + 1, b, heads, t, dh}, {}, loc),
                   {b, heads, t, dh}, loc);
  };
  Tensor scores = matmul(part(0), part(1), false, true, loc) * (1.0 / std::sqrt(double(dh)));
  if (o.causal) {
    // Query row r sees key column c <= r.
    Tensor rows = iota(DType::i32, {t, t}, 0, loc), cols = iota(DType::i32, {t, t}, 1, loc);
    scores = where(ge(rows, cols, loc), scores, full(scores.dtype(), {}, -1e9, loc), loc);
  }
  Tensor mixed = matmul(softmax(scores, -1, loc), part(2), false, false, loc);  // [B, H, T, dh]
  mixed = reshape(transpose(mixed, {0, 2, 1, 3}, loc), {b * t, d}, loc);
  return reshape(linear(p, name + "/out", mixed, loc), {b, t, d}, loc);
}

void self_attention_params(ArrayDict& d, const std::string& name, int64_t dim, uint64_t seed,
                           Init init, DType dtype) {
  linear_params(d, name + "/qkv", dim, 3 * dim, seed, init, dtype);
  linear_params(d, name + "/out", dim, dim, seed + 1, init, dtype);
}

}  // namespace fjit
