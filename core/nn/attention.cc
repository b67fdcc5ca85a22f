// Multi-head attention and its decode step (see core/nn/attention.h).
#include "core/nn/attention.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "core/nn/activations.h"
#include "core/nn/linear.h"
#include "core/nn/rotary.h"
#include "core/trace/attention.h"

namespace fjit {
namespace {

// Scaled dot-product attention: the fused op (core/trace/attention.h), blocked so that no
// [Tq, Tk] scores are kept; causal aligned to the end, key_lengths masking keys j >= len[b].
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
              const Tensor& key_lengths, double scale, Loc loc) {
  return dot_product_attention(q, k, v, causal, key_lengths, scale, loc);
}

// Checks x [B, T, D] (T == 1 for a step) and the heads; returns D / heads.
int64_t head_features(const char* layer, const Tensor& x, const MultiHeadAttentionOptions& o,
                      bool step, const Loc& loc) {
  if (!x.defined() || x.rank() != 3 || !is_floating(x.dtype()))
    detail::fail(layer, {x}, "expects a floating-point sequence [batch, tokens, features]", &loc);
  if (step && x.dim(1) != 1)
    detail::fail(layer, {x}, "expects one token [batch, 1, features]", &loc);
  const int64_t d = x.dim(2);
  if (o.heads < 1 || d % o.heads != 0)
    detail::fail(layer, {x}, "heads (" + std::to_string(o.heads) + ") must divide the features (" +
                 std::to_string(d) + ")", &loc);
  const int64_t dh = d / o.heads;
  if (o.rotary && dh % 2 != 0)
    detail::fail(layer, {x}, "rotary needs an even number of features per head, not " +
                 std::to_string(dh), &loc);
  return dh;
}

struct Qkv {
  Tensor q, k, v;  // [B, H, T, dh]
};

// The projection, split into heads, with rotary positions when asked.
Qkv project(const Params& p, const std::string& name, const Tensor& x,
            const MultiHeadAttentionOptions& o, int64_t dh, const Tensor& positions, const Loc& loc) {
  const int64_t b = x.dim(0), t = x.dim(1), h = o.heads;
  Tensor qkv = reshape(linear(p, name + "/qkv", x, o.bias, loc), {b, t, 3, h, dh}, loc);
  auto part = [&](int64_t i) {
    Tensor y = reshape(slice(qkv, {0, 0, i, 0, 0}, {b, t, i + 1, h, dh}, {}, loc), {b, t, h, dh}, loc);
    if (o.rotary && i < 2) y = rotary_embedding(y, positions, 10000.0, loc);
    return transpose(y, {0, 2, 1, 3}, loc);
  };
  return {part(0), part(1), part(2)};
}

// [B, H, T, dh] -> the out projection, [B, T, D].
Tensor merge(const Params& p, const std::string& name, const Tensor& y, bool bias, const Loc& loc) {
  const int64_t b = y.dim(0), h = y.dim(1), t = y.dim(2), dh = y.dim(3);
  return linear(p, name + "/out", reshape(transpose(y, {0, 2, 1, 3}, loc), {b, t, h * dh}, loc), bias, loc);
}

}  // namespace

Tensor multi_head_attention(const Params& p, const std::string& name, const Tensor& x,
                            const MultiHeadAttentionOptions& o, const Tensor& key_lengths, Loc loc) {
  detail::CompositeScope scope("multi_head_attention", {x, key_lengths});
  const int64_t dh = head_features("multi_head_attention", x, o, false, loc);
  if (key_lengths.defined() &&
      (key_lengths.dtype() != DType::i32 || key_lengths.shape() != Shape{x.dim(0)}))
    detail::fail("multi_head_attention", {x, key_lengths},
                 "expects key_lengths i32 [" + std::to_string(x.dim(0)) + "], one per sequence", &loc);
  Tensor positions = o.rotary ? iota(DType::i32, {x.dim(1)}, 0, loc) : Tensor();
  Qkv h = project(p, name, x, o, dh, positions, loc);
  return merge(p, name, attend(h.q, h.k, h.v, o.causal, key_lengths, 0, loc), o.bias, loc);
}

AttentionStep multi_head_attention_step(const Params& p, const std::string& name, const Tensor& x,
                                        const Tensor& pos, const Tensor& cache_k,
                                        const Tensor& cache_v, const MultiHeadAttentionOptions& o,
                                        Loc loc) {
  detail::CompositeScope scope("multi_head_attention_step", {x, pos, cache_k, cache_v});
  const int64_t dh = head_features("multi_head_attention_step", x, o, true, loc);
  if (!pos.defined() || pos.dtype() != DType::i32 || pos.rank() != 0)
    detail::fail("multi_head_attention_step", {x, pos}, "expects the position as an i32 scalar", &loc);
  const int64_t b = x.dim(0);
  for (const Tensor& c : {cache_k, cache_v})
    if (!c.defined() || c.rank() != 4 || c.dtype() != x.dtype() || c.dim(0) != b ||
        c.dim(1) != o.heads || c.dim(3) != dh)
      detail::fail("multi_head_attention_step", {x, cache_k, cache_v},
                   "expects caches " + type_str(x.dtype(), {b, o.heads, -1, dh}) +
                   " [batch, heads, max tokens, head features]", &loc);
  if (cache_k.shape() != cache_v.shape())
    detail::fail("multi_head_attention_step", {cache_k, cache_v}, "the two caches differ in shape", &loc);
  Qkv h = project(p, name, x, o, dh, reshape(pos, {1}, loc), loc);
  // Row pos of the caches takes this token's key and value: fixed shapes whatever pos is.
  Tensor here = eq(iota(DType::i32, {1, 1, cache_k.dim(2), 1}, 2, loc), pos, loc);
  Tensor k = where(here, h.k, cache_k, loc), v = where(here, h.v, cache_v, loc);
  Tensor lengths = broadcast_to(reshape(add(pos, scalar(DType::i32, 1, loc), loc), {1}, loc), {b}, loc);
  return {merge(p, name, attend(h.q, k, v, false, lengths, 0, loc), o.bias, loc), k, v};
}

void multi_head_attention_params(ArrayDict& d, const std::string& name, int64_t dim, uint64_t seed,
                                 const MultiHeadAttentionOptions& o, Init init, DType dtype) {
  if (o.heads < 1 || dim % o.heads != 0)
    throw std::invalid_argument("multi_head_attention_params: '" + name + "': heads (" +
                                std::to_string(o.heads) + ") must divide the features (" +
                                std::to_string(dim) + ")");
  linear_params(d, name + "/qkv", dim, 3 * dim, seed, init, dtype, o.bias);
  linear_params(d, name + "/out", dim, dim, seed + 1, init, dtype, o.bias);
}

Tensor self_attention(const Params& p, const std::string& name, const Tensor& h,
                      const AttentionOptions& o, Loc loc) {
  detail::CompositeScope scope("self_attention", {h});
  return multi_head_attention(p, name, h, {.heads = o.heads, .causal = o.causal}, Tensor(), loc);
}

void self_attention_params(ArrayDict& d, const std::string& name, int64_t dim, uint64_t seed,
                           Init init, DType dtype) {
  linear_params(d, name + "/qkv", dim, 3 * dim, seed, init, dtype);
  linear_params(d, name + "/out", dim, dim, seed + 1, init, dtype);
}

}  // namespace fjit
