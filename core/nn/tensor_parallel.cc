#include "core/nn/tensor_parallel.h"

#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/nn/activations.h"
#include "core/nn/linear.h"
#include "core/nn/rotary.h"
#include "core/trace/attention.h"
#include "core/trace/collectives.h"
#include "core/trace/control_flow.h"

namespace fjit {

// f: a custom VJP, so that its psum is in the backward pass only.
Tensor tp_copy(const Tensor& x, const std::string& axis, Loc loc) {
  auto f = custom_vjp([](const Tensor& a) { return std::pair{a, std::vector<Tensor>{}}; },
                      [axis, loc](const std::vector<Tensor>&, const Tensor& ct) { return psum(ct, axis, loc); }, loc);
  return f(x);
}

// g: s + (x - x) is s exactly (an exact zero added), and its gradient flows through x alone.
Tensor tp_reduce(const Tensor& x, const std::string& axis, Loc loc) {
  return add(stop_gradient(psum(x, axis, loc), loc), sub(x, stop_gradient(x, loc), loc), loc);
}

Tensor tp_gelu_mlp(const Params& p, const std::string& name, const Tensor& x, const std::string& axis,
                   bool tanh_approximation, Loc loc) {
  detail::CompositeScope scope("tp_gelu_mlp", {x});
  if (!x.defined() || x.rank() < 1 || !is_floating(x.dtype()))
    detail::fail("tp_gelu_mlp", {x}, "expects floating-point features [..., D]", &loc);
  Tensor h = gelu(linear(p, name + "/fc", tp_copy(x, axis, loc), loc), tanh_approximation, loc);
  Tensor y = tp_reduce(linear(p, name + "/proj", h, /*bias=*/false, loc), axis, loc);
  return p.contains(name + "/proj/b") ? add(y, weight(p, name + "/proj/b", x.dtype(), loc), loc) : y;
}

Tensor tp_swiglu_mlp(const Params& p, const std::string& name, const Tensor& x, const std::string& axis, Loc loc) {
  detail::CompositeScope scope("tp_swiglu_mlp", {x});
  if (!x.defined() || x.rank() < 1 || !is_floating(x.dtype()))
    detail::fail("tp_swiglu_mlp", {x}, "expects floating-point features [..., D]", &loc);
  Tensor xc = tp_copy(x, axis, loc);
  Tensor h = mul(silu(linear(p, name + "/gate", xc, /*bias=*/false, loc), loc),
                 linear(p, name + "/up", xc, /*bias=*/false, loc), loc);
  return tp_reduce(linear(p, name + "/down", h, /*bias=*/false, loc), axis, loc);
}

namespace {
// [B, kv, T, dh] -> [B, kv group, T, dh]: kv head j serves query heads [j group, (j + 1) group),
// as multi_head_attention's repeat_heads pairs them.
Tensor repeat_heads(const Tensor& y, int64_t group, const Loc& loc) {
  if (group == 1) return y;
  const int64_t b = y.dim(0), kv = y.dim(1), t = y.dim(2), dh = y.dim(3);
  return reshape(broadcast_to(reshape(y, {b, kv, 1, t, dh}, loc), {b, kv, group, t, dh}, loc),
                 {b, kv * group, t, dh}, loc);
}
}  // namespace

namespace {
// The heads of one replica of `axis`: dh features each, h query and hk key/value heads.
struct LocalHeads {
  int64_t dh, h, hk, group;
};
LocalHeads local_heads(const char* layer, const Tensor& x, const std::string& axis,
                       const MultiHeadAttentionOptions& o, const Loc& loc) {
  if (!x.defined() || x.rank() != 3 || !is_floating(x.dtype()))
    detail::fail(layer, {x}, "expects a floating-point sequence [batch, tokens, features]", &loc);
  const int n = axis_size(axis, loc);
  const int64_t d = x.dim(2);
  if (o.heads < 1 || d % o.heads != 0 || o.heads % n != 0)
    detail::fail(layer, {x}, fmt::format("heads ({}) must divide the features ({}) and be a multiple of "
                                         "axis '{}' (size {})", o.heads, d, axis, n), &loc);
  const int64_t kv = o.kv_heads == 0 ? o.heads : o.kv_heads;
  if (kv < 1 || o.heads % kv != 0 || kv % n != 0)
    detail::fail(layer, {x}, fmt::format("kv_heads ({}) must divide heads ({}) and be a multiple of "
                                         "axis '{}' (size {})", kv, o.heads, axis, n), &loc);
  const int64_t dh = d / o.heads;
  if (o.rotary && (dh % 2 != 0 || !(o.rope_theta > 0)))
    detail::fail(layer, {x}, fmt::format("rotary needs an even head size (not {}) and a positive "
                                         "rope_theta (not {})", dh, o.rope_theta), &loc);
  // The replica's query heads [r h, (r + 1) h) use kv heads [r hk, (r + 1) hk): the same
  // pairing as the unsplit layer's, since h = group hk.
  return {dh, o.heads / n, kv / n, o.heads / kv};
}

// This replica's heads of `part` ("q", "k", "v"): [B, count, T, dh], rotated at `positions`
// when `rotate` and the layer is rotary.
Tensor project_heads(const Params& p, const std::string& name, const char* part, const Tensor& x, int64_t count,
                     int64_t dh, bool rotate, const Tensor& positions, const MultiHeadAttentionOptions& o,
                     const Loc& loc) {
  const int64_t b = x.dim(0), t = x.dim(1);
  Tensor y = reshape(linear(p, name + "/" + part, x, o.bias, loc), {b, t, count, dh}, loc);
  if (o.rotary && rotate) y = rotary_embedding(y, positions, o.rope_theta, loc);
  return transpose(y, {0, 2, 1, 3}, loc);
}

// y [B, h, T, dh] of this replica's heads -> the joined out projection [B, T, D].
Tensor project_out(const Params& p, const std::string& name, const Tensor& y, const std::string& axis,
                   const MultiHeadAttentionOptions& o, DType dtype, const Loc& loc) {
  const int64_t b = y.dim(0), h = y.dim(1), t = y.dim(2), dh = y.dim(3);
  Tensor merged = reshape(transpose(y, {0, 2, 1, 3}, loc), {b, t, h * dh}, loc);
  Tensor out = tp_reduce(linear(p, name + "/out", merged, /*bias=*/false, loc), axis, loc);
  return o.bias ? add(out, weight(p, name + "/out/b", dtype, loc), loc) : out;
}
}  // namespace

Tensor tp_attention(const Params& p, const std::string& name, const Tensor& x, const std::string& axis,
                    const MultiHeadAttentionOptions& o, const Tensor& key_lengths, Loc loc) {
  detail::CompositeScope scope("tp_attention", {x, key_lengths});
  const LocalHeads s = local_heads("tp_attention", x, axis, o, loc);
  // Every replica's heads are rotated at the same positions, as the unsplit layer's are.
  Tensor positions = o.rotary ? iota(DType::i32, {x.dim(1)}, 0, loc) : Tensor();
  Tensor xc = tp_copy(x, axis, loc);
  auto heads = [&](const char* part, int64_t count, bool rotate) {
    return project_heads(p, name, part, xc, count, s.dh, rotate, positions, o, loc);
  };
  Tensor k = repeat_heads(heads("k", s.hk, true), s.group, loc), v = repeat_heads(heads("v", s.hk, false), s.group, loc);
  Tensor y = dot_product_attention(heads("q", s.h, true), k, v, o.causal, key_lengths, 0, loc);
  return project_out(p, name, y, axis, o, x.dtype(), loc);
}

AttentionStep tp_attention_step(const Params& p, const std::string& name, const Tensor& x, const Tensor& pos,
                                const Tensor& cache_k, const Tensor& cache_v, const std::string& axis,
                                const MultiHeadAttentionOptions& o, Loc loc) {
  detail::CompositeScope scope("tp_attention_step", {x, pos, cache_k, cache_v});
  const LocalHeads s = local_heads("tp_attention_step", x, axis, o, loc);
  if (x.dim(1) != 1) detail::fail("tp_attention_step", {x}, "expects one token [batch, 1, features]", &loc);
  if (!pos.defined() || pos.dtype() != DType::i32 || pos.rank() != 0)
    detail::fail("tp_attention_step", {x, pos}, "expects the position as an i32 scalar", &loc);
  const int64_t b = x.dim(0);
  for (const Tensor& c : {cache_k, cache_v})
    if (!c.defined() || c.rank() != 4 || c.dtype() != x.dtype() || c.dim(0) != b || c.dim(1) != s.hk ||
        c.dim(3) != s.dh || c.shape() != cache_k.shape())
      detail::fail("tp_attention_step", {x, cache_k, cache_v},
                   fmt::format("expects both caches {} [batch, this replica's kv heads, max tokens, head features] "
                               "on axis '{}', got {} and {}", type_str(x.dtype(), {b, s.hk, -1, s.dh}), axis,
                               c.defined() ? cache_k.type_string() : "none",
                               cache_v.defined() ? cache_v.type_string() : "none"), &loc);
  Tensor positions = reshape(pos, {1}, loc);
  auto heads = [&](const char* part, int64_t count, bool rotate) {
    return project_heads(p, name, part, x, count, s.dh, rotate, positions, o, loc);
  };
  // Row pos of the caches takes this token's key and value: fixed shapes whatever pos is.
  Tensor here = eq(iota(DType::i32, {1, 1, cache_k.dim(2), 1}, 2, loc), pos, loc);
  Tensor k = where(here, heads("k", s.hk, true), cache_k, loc), v = where(here, heads("v", s.hk, false), cache_v, loc);
  Tensor lengths = broadcast_to(reshape(add(pos, scalar(DType::i32, 1, loc), loc), {1}, loc), {b}, loc);
  // As multi_head_attention_step: each kv head's group of query heads attends as `group` rows.
  Tensor q = reshape(heads("q", s.h, true), {b, s.hk, s.group, s.dh}, loc);
  Tensor y = reshape(dot_product_attention(q, k, v, false, lengths, 0, loc), {b, s.h, 1, s.dh}, loc);
  return {project_out(p, name, y, axis, o, x.dtype(), loc), k, v};
}

namespace {
// Columns [begin, end) of a rank-1 or rank-2 array (rank 1: elements).
Array columns(const Array& a, int64_t begin, int64_t end) {
  const int64_t rows = a.rank() == 2 ? a.shape()[0] : 1, cols = a.shape().back();
  Shape s = a.shape();
  s.back() = end - begin;
  Array out(a.dtype(), s);
  const size_t e = dtype_size(a.dtype());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(out.raw()) + r * (end - begin) * e,
                static_cast<const char*>(a.raw()) + (r * cols + begin) * e, (end - begin) * e);
  return out;
}
}  // namespace

ArrayDict tp_attention_params(const ArrayDict& mha, const std::string& name) {
  const std::string w = name + "/qkv/w", bias = name + "/qkv/b";
  if (!mha.contains(w)) throw std::invalid_argument("tp_attention_params: no '" + w + "'");
  const Array& qkv = mha[w];
  // [D, (H + 2 KV) dh] with H dh = D: D query columns, then (cols - D) / 2 key and value columns.
  const int64_t d = qkv.rank() == 2 ? qkv.shape()[0] : -1, cols = qkv.rank() == 2 ? qkv.shape()[1] : -1;
  if (qkv.rank() != 2 || cols <= d || (cols - d) % 2 != 0)
    throw std::invalid_argument(fmt::format("tp_attention_params: '{}' has {} columns, not (H + 2 KV) dh "
                                            "with H dh = {} (its rows)", w, cols, d));
  const int64_t kvc = (cols - d) / 2;
  const int64_t bounds[] = {0, d, d + kvc, cols};
  ArrayDict out;
  for (size_t i = 0; i < mha.size(); ++i) {
    const std::string& key = mha.name(i);
    if (key == w || key == bias) {
      const char* base = key == w ? "/w" : "/b";
      const char* parts[] = {"/q", "/k", "/v"};
      for (int k = 0; k < 3; ++k) out.set(name + parts[k] + base, columns(mha.value(i), bounds[k], bounds[k + 1]));
    } else {
      out.set(key, mha.value(i));
    }
  }
  return out;
}

}  // namespace fjit
