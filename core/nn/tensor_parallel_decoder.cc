// The tensor-parallel block and decoder (see core/nn/tensor_parallel_decoder.h).
#include "core/nn/tensor_parallel_decoder.h"

#include <fmt/format.h>

#include "core/nn/embedding.h"
#include "core/nn/linear.h"
#include "core/nn/normalization.h"
#include "core/nn/precision.h"
#include "core/nn/tensor_parallel.h"
#include "core/trace/remat.h"

namespace fjit {
namespace {

using Options = TransformerBlockOptions;

// transformer_block's norms: each with its default epsilon when o.norm_eps is 0.
Tensor norm(const Params& p, const std::string& name, const Tensor& x, Options::Norm kind, double eps,
            const Loc& loc) {
  if (kind == Options::Norm::kRmsNorm) return rms_norm(p, name, x, eps > 0 ? eps : 1e-6, loc);
  return layer_norm(p, name, x, eps > 0 ? eps : 1e-5, loc);
}

Tensor branch(const Options& o, const Tensor& y, int index) {
  return o.residual_branch ? o.residual_branch(y, index) : y;
}

// The block's second half: x + mlp(norm2(x)), the MLP split over `axis`.
Tensor mlp_half(const Params& p, const std::string& name, const Tensor& x, const std::string& axis, const Options& o,
                const Loc& loc) {
  Tensor m = norm(p, name + "/norm2", x, o.norm, o.norm_eps, loc);
  m = o.mlp == Options::Mlp::kSwiglu ? tp_swiglu_mlp(p, name + "/mlp", m, axis, loc)
                                     : tp_gelu_mlp(p, name + "/mlp", m, axis, o.gelu_tanh, loc);
  return add(x, branch(o, m, 1), loc);
}

// Rows of the learned positions table, a half-precision table read as f32.
Tensor position_rows(const Tensor& rows, const Loc& loc) {
  const DType dt = rows.dtype();
  return dt == DType::bf16 || dt == DType::f16 ? cast(rows, DType::f32, loc) : rows;
}

// The final norm and the vocabulary projection (tied or a head): h [N, D] -> [N, vocab].
Tensor to_logits(const Params& p, const DecoderConfig& c, const Tensor& x, int64_t rows, const Loc& loc) {
  Tensor h = reshape(norm(p, "norm", x, c.norm, c.norm_eps, loc), {rows, c.dim}, loc);
  return c.tied_embeddings ? policy_matmul(h, weight(p, "tok/table", h.dtype(), loc), false, true, loc)
                           : linear(p, "head", h, false, loc);
}

}  // namespace

Tensor tp_transformer_block(const Params& p, const std::string& name, const Tensor& x, const std::string& axis,
                            const Options& o, const Tensor& key_lengths, Loc loc) {
  detail::CompositeScope scope("tp_transformer_block", {x, key_lengths});
  if (!x.defined() || x.rank() != 3 || !is_floating(x.dtype()))
    detail::fail("tp_transformer_block", {x}, "expects a floating-point sequence [batch, tokens, features]", &loc);
  if (!(o.norm_eps >= 0))
    detail::fail("tp_transformer_block", {x},
                 fmt::format("norm_eps must be positive (or 0: the default), not {}", o.norm_eps), &loc);
  auto body = [&](const Tensor& x) {
    Tensor a = tp_attention(p, name + "/attn", norm(p, name + "/norm1", x, o.norm, o.norm_eps, loc), axis,
                            o.attention, key_lengths, loc);
    return mlp_half(p, name, add(x, branch(o, a, 0), loc), axis, o, loc);
  };
  return o.remat ? remat(body, loc)(x) : body(x);
}

Tensor tp_decoder_logits(const Params& p, const DecoderConfig& c, const Tensor& ids, const std::string& axis,
                         Loc loc) {
  detail::CompositeScope scope("tp_decoder_logits", {ids});
  if (!ids.defined() || ids.rank() != 2 || ids.dtype() != DType::i32)
    detail::fail("tp_decoder_logits", {ids}, "expects token ids i32 [batch, tokens]", &loc);
  const int64_t b = ids.dim(0), t = ids.dim(1);
  if (t > c.context)
    detail::fail("tp_decoder_logits", {ids}, fmt::format("{} tokens exceed the model's context of {}", t, c.context),
                 &loc);
  Tensor x = embedding(p, "tok", ids, loc);  // [B, T, D]
  if (!c.rotary)
    x = add(x, reshape(position_rows(slice(p["pos/table"], {0, 0}, {t, c.dim}, {}, loc), loc), {1, t, c.dim}, loc), loc);
  const Options block = c.block();
  for (int64_t i = 0; i < c.layers; ++i)
    x = tp_transformer_block(p, fmt::format("block{}", i), x, axis, block, Tensor(), loc);
  return reshape(to_logits(p, c, x, b * t, loc), {b, t, c.vocab}, loc);
}

AttentionStep tp_transformer_block_step(const Params& p, const std::string& name, const Tensor& x, const Tensor& pos,
                                        const Tensor& cache_k, const Tensor& cache_v, const std::string& axis,
                                        const Options& o, Loc loc) {
  detail::CompositeScope scope("tp_transformer_block_step", {x, pos, cache_k, cache_v});
  if (!x.defined() || x.rank() != 3 || x.dim(1) != 1 || !is_floating(x.dtype()))
    detail::fail("tp_transformer_block_step", {x}, "expects one floating-point token [batch, 1, features]", &loc);
  AttentionStep a = tp_attention_step(p, name + "/attn", norm(p, name + "/norm1", x, o.norm, o.norm_eps, loc), pos,
                                      cache_k, cache_v, axis, o.attention, loc);
  return {mlp_half(p, name, add(x, branch(o, a.y, 0), loc), axis, o, loc), a.cache_k, a.cache_v};
}

DecoderStep tp_decoder_step(const Params& p, const DecoderConfig& c, const Tensor& ids, const Tensor& pos,
                            const TensorDict& cache, const std::string& axis, Loc loc) {
  detail::CompositeScope scope("tp_decoder_step", {ids, pos});
  if (!ids.defined() || ids.rank() != 2 || ids.dim(1) != 1 || ids.dtype() != DType::i32)
    detail::fail("tp_decoder_step", {ids}, "expects token ids i32 [batch, 1]", &loc);
  if (!pos.defined() || pos.rank() != 0 || pos.dtype() != DType::i32)
    detail::fail("tp_decoder_step", {pos}, "expects the position as an i32 scalar", &loc);
  const int64_t b = ids.dim(0);
  Tensor x = embedding(p, "tok", ids, loc);  // [B, 1, D]
  if (!c.rotary)
    x = add(x, reshape(position_rows(gather(p["pos/table"], reshape(pos, {1}, loc), 0, loc), loc), {1, 1, c.dim}, loc),
            loc);
  const Options block = c.block();
  DecoderStep out;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string k = fmt::format("k{}", i), v = fmt::format("v{}", i);
    for (const std::string& name : {k, v})
      if (!cache.contains(name))
        detail::fail("tp_decoder_step", {ids}, fmt::format("the cache has no '{}' (decoder_cache's names)", name), &loc);
    AttentionStep s = tp_transformer_block_step(p, fmt::format("block{}", i), x, pos, cache[k], cache[v], axis, block, loc);
    x = s.y;
    out.cache.set(k, s.cache_k);
    out.cache.set(v, s.cache_v);
  }
  out.logits = to_logits(p, c, x, b, loc);
  return out;
}

ArrayDict tp_decoder_params(const ArrayDict& params, const DecoderConfig& c) {
  ArrayDict out = params;
  for (int64_t i = 0; i < c.layers; ++i) out = tp_attention_params(out, fmt::format("block{}/attn", i));
  return out;
}

}  // namespace fjit
