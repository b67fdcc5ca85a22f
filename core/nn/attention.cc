// Multi-head attention and its decode step (see core/nn/attention.h).
#include "core/nn/attention.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "core/nn/activations.h"
#include "core/nn/linear.h"
#include "core/nn/precision.h"
#include "core/nn/rotary.h"
#include "core/trace/attention.h"

namespace fjit {
namespace {

// Scaled dot-product attention: the fused op (core/trace/attention.h; bf16 q, k, v under the
// bf16 policy, core/nn/precision.h), blocked so that no
// [Tq, Tk] scores are kept; causal aligned to the end, key_lengths masking keys j >= len[b].
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
              const Tensor& key_lengths, double scale, Loc loc) {
  return policy_attention(q, k, v, causal, key_lengths, scale, loc);
}

// The key/value heads: o.kv_heads, or o.heads when 0.
int64_t kv_heads_of(const MultiHeadAttentionOptions& o) { return o.kv_heads == 0 ? o.heads : o.kv_heads; }

// Checks x [B, T, D] (T == 1 for a step) and the heads; returns D / heads.
int64_t head_features(const char* layer, const Tensor& x, const MultiHeadAttentionOptions& o,
                      bool step, const Loc& loc) {
  if (!x.defined() || x.rank() != 3 || !is_floating(x.dtype()))
    detail::fail(layer, {x}, "expects a floating-point sequence [batch, tokens, features]", &loc);
  if (step && x.dim(1) != 1)
    detail::fail(layer, {x}, "expects one token [batch, 1, features]", &loc);
  const int64_t d = x.dim(2);
  if (o.heads < 1 || d % o.heads != 0)
    detail::fail(layer, {x}, fmt::format("heads ({}) must divide the features ({})", o.heads, d), &loc);
  if (o.kv_heads < 0 || o.heads % kv_heads_of(o) != 0)
    detail::fail(layer, {x}, fmt::format("kv_heads ({}) must divide heads ({})", o.kv_heads, o.heads), &loc);
  const int64_t dh = d / o.heads;
  if (o.rotary && dh % 2 != 0)
    detail::fail(layer, {x}, fmt::format("rotary needs an even number of features per head, not {}", dh), &loc);
  if (o.rotary && !(o.rope_theta > 0))
    detail::fail(layer, {x}, fmt::format("rope_theta must be positive, not {}", o.rope_theta), &loc);
  return dh;
}

struct Qkv {
  Tensor q;     // [B, heads, T, dh]
  Tensor k, v;  // [B, kv_heads, T, dh]
};

// The projection, split into heads, with rotary positions when asked. The columns of qkv are
// the heads' queries, then the kv_heads keys, then the kv_heads values, each dh wide.
Qkv project(const Params& p, const std::string& name, const Tensor& x,
            const MultiHeadAttentionOptions& o, int64_t dh, const Tensor& positions, const Loc& loc) {
  const int64_t b = x.dim(0), t = x.dim(1), h = o.heads, kv = kv_heads_of(o);
  Tensor qkv = linear(p, name + "/qkv", x, o.bias, loc);  // [B, T, (h + 2 kv) dh]
  auto part = [&](int64_t first, int64_t heads, bool rotate) {
    Tensor y = reshape(slice(qkv, {0, 0, first * dh}, {b, t, (first + heads) * dh}, {}, loc),
                       {b, t, heads, dh}, loc);
    if (o.rotary && rotate) y = rotary_embedding(y, positions, o.rope_theta, loc);
    return transpose(y, {0, 2, 1, 3}, loc);
  };
  return {part(0, h, true), part(h, kv, true), part(h + kv, kv, false)};
}

// [B, kv, T, dh] -> [B, kv * group, T, dh]: key/value head j serves query heads
// [j * group, (j + 1) * group) (Hugging Face's repeat_kv).
Tensor repeat_heads(const Tensor& y, int64_t group, const Loc& loc) {
  if (group == 1) return y;
  const int64_t b = y.dim(0), kv = y.dim(1), t = y.dim(2), dh = y.dim(3);
  Tensor wide = broadcast_to(reshape(y, {b, kv, 1, t, dh}, loc), {b, kv, group, t, dh}, loc);
  return reshape(wide, {b, kv * group, t, dh}, loc);
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
  const int64_t group = o.heads / kv_heads_of(o);
  Tensor k = repeat_heads(h.k, group, loc), v = repeat_heads(h.v, group, loc);
  return merge(p, name, attend(h.q, k, v, o.causal, key_lengths, 0, loc), o.bias, loc);
}

AttentionStep multi_head_attention_step(const Params& p, const std::string& name, const Tensor& x,
                                        const Tensor& pos, const Tensor& cache_k,
                                        const Tensor& cache_v, const MultiHeadAttentionOptions& o,
                                        Loc loc) {
  detail::CompositeScope scope("multi_head_attention_step", {x, pos, cache_k, cache_v});
  const int64_t dh = head_features("multi_head_attention_step", x, o, true, loc);
  if (!pos.defined() || pos.dtype() != DType::i32 || pos.rank() != 0)
    detail::fail("multi_head_attention_step", {x, pos}, "expects the position as an i32 scalar", &loc);
  const int64_t b = x.dim(0), kv = kv_heads_of(o), group = o.heads / kv;
  for (const Tensor& c : {cache_k, cache_v})
    if (!c.defined() || c.rank() != 4 || c.dtype() != x.dtype() || c.dim(0) != b ||
        c.dim(1) != kv || c.dim(3) != dh)
      detail::fail("multi_head_attention_step", {x, cache_k, cache_v},
                   "expects caches " + type_str(x.dtype(), {b, kv, -1, dh}) +
                   " [batch, kv heads, max tokens, head features]", &loc);
  if (cache_k.shape() != cache_v.shape())
    detail::fail("multi_head_attention_step", {cache_k, cache_v}, "the two caches differ in shape", &loc);
  Qkv h = project(p, name, x, o, dh, reshape(pos, {1}, loc), loc);
  // Row pos of the caches takes this token's key and value: fixed shapes whatever pos is.
  Tensor here = eq(iota(DType::i32, {1, 1, cache_k.dim(2), 1}, 2, loc), pos, loc);
  Tensor k = where(here, h.k, cache_k, loc), v = where(here, h.v, cache_v, loc);
  Tensor lengths = broadcast_to(reshape(add(pos, scalar(DType::i32, 1, loc), loc), {1}, loc), {b}, loc);
  // One token: the group of query heads that shares a key/value head attends as `group` query
  // rows of that head, so the cache is read as it is, never repeated.
  Tensor q = reshape(h.q, {b, kv, group, dh}, loc);
  Tensor y = reshape(attend(q, k, v, false, lengths, 0, loc), {b, o.heads, 1, dh}, loc);
  return {merge(p, name, y, o.bias, loc), k, v};
}

void multi_head_attention_params(ArrayDict& d, const std::string& name, int64_t dim, uint64_t seed,
                                 const MultiHeadAttentionOptions& o, Init init, DType dtype) {
  if (o.heads < 1 || dim % o.heads != 0)
    throw std::invalid_argument(fmt::format(
        "multi_head_attention_params: '{}': heads ({}) must divide the features ({})", name, o.heads, dim));
  if (o.kv_heads < 0 || o.heads % kv_heads_of(o) != 0)
    throw std::invalid_argument(fmt::format(
        "multi_head_attention_params: '{}': kv_heads ({}) must divide heads ({})", name, o.kv_heads, o.heads));
  const int64_t dh = dim / o.heads;
  linear_params(d, name + "/qkv", dim, (o.heads + 2 * kv_heads_of(o)) * dh, seed, init, dtype, o.bias);
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
