// The decoder-only language model (see core/nn/decoder.h).
#include "core/nn/decoder.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/lib/initializers.h"
#include "core/nn/embedding.h"
#include "core/nn/linear.h"
#include "core/nn/normalization.h"
#include "core/nn/precision.h"

namespace fjit {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string block_name(int64_t i) { return fmt::format("block{}", i); }

Tensor final_norm(const Params& p, const DecoderConfig& c, const Tensor& x, Loc loc) {
  if (c.norm == TransformerBlockOptions::Norm::kRmsNorm)
    return rms_norm(p, "norm", x, c.norm_eps > 0 ? c.norm_eps : 1e-6, loc);
  return layer_norm(p, "norm", x, c.norm_eps > 0 ? c.norm_eps : 1e-5, loc);
}

// [N, dim] -> [N, vocab] through the tied token table or the head (a linear layer without a
// bias, so that a LoRA adapter on "head" applies).
Tensor project_to_vocab(const Params& p, const DecoderConfig& c, const Tensor& h, Loc loc) {
  return c.tied_embeddings ? policy_matmul(h, weight(p, "tok/table", h.dtype(), loc), false, true, loc)
                           : linear(p, "head", h, false, loc);
}

// Rows of the learned positions table (a half-precision table cast to f32).
Tensor positions(const Tensor& rows, Loc loc) {
  const DType t = rows.dtype();
  return t == DType::bf16 || t == DType::f16 ? cast(rows, DType::f32, loc) : rows;
}

int64_t kv_heads_of(const DecoderConfig& c) { return c.kv_heads == 0 ? c.heads : c.kv_heads; }

}  // namespace

TransformerBlockOptions DecoderConfig::block() const {
  TransformerBlockOptions o;
  o.attention.heads = heads;
  o.attention.causal = true;
  o.attention.rotary = rotary;
  o.attention.bias = attention_bias;
  o.attention.kv_heads = kv_heads;
  o.attention.rope_theta = rope_theta;
  o.norm = norm;
  o.norm_eps = norm_eps;
  o.gelu_tanh = gelu_tanh;
  o.mlp = mlp;
  o.mlp_hidden = mlp_hidden;
  o.remat = remat;
  return o;
}

std::string DecoderConfig::describe() const {
  std::string heads_text = fmt::format("{} heads", heads);
  if (kv_heads != 0 && kv_heads != heads) heads_text += fmt::format(" ({} kv heads)", kv_heads);
  std::string extras;
  if (!attention_bias) extras += ", no attention bias";
  if (norm_eps > 0) extras += fmt::format(", norm eps {:g}", norm_eps);
  if (rotary && rope_theta != 10000.0) extras += fmt::format(", rope theta {:g}", rope_theta);
  return fmt::format("{} layers, d {}, {}, context {}, vocab {}, {} positions, {}, {}{}{}{}",
                     layers, dim, heads_text, context, vocab, rotary ? "rotary" : "learned",
                     mlp == TransformerBlockOptions::Mlp::kSwiglu ? "swiglu"
                     : gelu_tanh                                   ? "gelu (tanh)"
                                                                   : "gelu",
                     norm == TransformerBlockOptions::Norm::kRmsNorm ? "rms norm" : "layer norm",
                     extras, tied_embeddings ? ", tied embeddings" : "", remat ? ", remat" : "");
}

void validate(const DecoderConfig& c) {
  if (c.vocab < 1 || c.context < 1 || c.dim < 1 || c.layers < 1 || c.heads < 1 || c.mlp_hidden < 0 ||
      c.kv_heads < 0)
    throw std::invalid_argument("decoder: sizes must be positive: " + c.describe());
  if (c.dim % c.heads != 0)
    throw std::invalid_argument(fmt::format("decoder: {} heads do not divide d {}", c.heads, c.dim));
  if (c.heads % kv_heads_of(c) != 0)
    throw std::invalid_argument(fmt::format("decoder: {} kv heads do not divide {} heads", c.kv_heads, c.heads));
  if (c.rotary && c.head_dim() % 2 != 0)
    throw std::invalid_argument(fmt::format("decoder: rotary positions need an even head size, not {}",
                                            c.head_dim()));
  if (!(c.norm_eps >= 0) || !std::isfinite(c.norm_eps))
    throw std::invalid_argument(fmt::format("decoder: norm eps must be positive (or 0: the default), not {}",
                                            c.norm_eps));
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    throw std::invalid_argument(fmt::format("decoder: rope theta must be positive, not {}", c.rope_theta));
}

void decoder_params(ArrayDict& d, const DecoderConfig& c, uint64_t seed, DType dtype) {
  validate(c);
  constexpr double kStd = 0.02;
  const double residual_std = kStd / std::sqrt(2.0 * static_cast<double>(c.layers));
  uint64_t stream = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next_seed = [&] { return stream += 0xD1B54A32D192ED03ull; };
  d.set("tok/table", normal_array({c.vocab, c.dim}, next_seed(), kStd, dtype));
  if (!c.rotary) d.set("pos/table", normal_array({c.context, c.dim}, next_seed(), kStd, dtype));
  for (int64_t i = 0; i < c.layers; ++i) {
    // The block's own initializer gives the names and shapes; GPT-2's scheme redraws them.
    ArrayDict block;
    transformer_block_params(block, block_name(i), c.dim, next_seed(), c.block(), Init::glorot_uniform, dtype);
    for (const auto& [name, a] : block) {
      const bool residual = ends_with(name, "attn/out/w") || ends_with(name, "mlp/proj/w") ||
                            ends_with(name, "mlp/down/w");
      if (ends_with(name, "/w"))
        d.set(name, normal_array(a.shape(), next_seed(), residual ? residual_std : kStd, dtype));
      else
        d.set(name, a);  // biases (zero) and norm gains (one) as the layer made them
    }
  }
  if (c.norm == TransformerBlockOptions::Norm::kRmsNorm) rms_norm_params(d, "norm", c.dim, dtype);
  else layer_norm_params(d, "norm", c.dim, dtype);
  if (!c.tied_embeddings) d.set("head/w", normal_array({c.dim, c.vocab}, next_seed(), kStd, dtype));
}

int64_t parameter_count(const ArrayDict& params) {
  int64_t n = 0;
  for (const auto& [name, a] : params) n += a.size();
  return n;
}

Tensor decoder_logits(const Params& p, const DecoderConfig& c, const Tensor& ids, Loc loc) {
  detail::CompositeScope scope("decoder_logits", {ids});
  if (!ids.defined() || ids.rank() != 2 || ids.dtype() != DType::i32)
    detail::fail("decoder_logits", {ids}, "expects token ids i32 [batch, tokens]", &loc);
  const int64_t b = ids.dim(0), t = ids.dim(1);
  if (t > c.context)
    detail::fail("decoder_logits", {ids},
                 fmt::format("{} tokens exceed the model's context of {}", t, c.context), &loc);
  Tensor x = embedding(p, "tok", ids, loc);  // [B, T, D]
  if (!c.rotary) x = x + reshape(positions(slice(p["pos/table"], {0, 0}, {t, c.dim}, {}, loc), loc), {1, t, c.dim}, loc);
  const TransformerBlockOptions block = c.block();
  for (int64_t i = 0; i < c.layers; ++i) x = transformer_block(p, block_name(i), x, block, Tensor(), loc);
  Tensor h = reshape(final_norm(p, c, x, loc), {b * t, c.dim}, loc);
  return reshape(project_to_vocab(p, c, h, loc), {b, t, c.vocab}, loc);
}

DecoderStep decoder_step(const Params& p, const DecoderConfig& c, const Tensor& ids,
                         const Tensor& pos, const TensorDict& cache, Loc loc) {
  detail::CompositeScope scope("decoder_step", {ids, pos});
  if (!ids.defined() || ids.rank() != 2 || ids.dim(1) != 1 || ids.dtype() != DType::i32)
    detail::fail("decoder_step", {ids}, "expects token ids i32 [batch, 1]", &loc);
  if (!pos.defined() || pos.rank() != 0 || pos.dtype() != DType::i32)
    detail::fail("decoder_step", {pos}, "expects the position as an i32 scalar", &loc);
  const int64_t b = ids.dim(0);
  Tensor x = embedding(p, "tok", ids, loc);  // [B, 1, D]
  if (!c.rotary)
    x = x + reshape(positions(gather(p["pos/table"], reshape(pos, {1}, loc), 0, loc), loc), {1, 1, c.dim}, loc);
  const TransformerBlockOptions block = c.block();
  DecoderStep out;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string k = fmt::format("k{}", i), v = fmt::format("v{}", i);
    AttentionStep s = transformer_block_step(p, block_name(i), x, pos, cache[k], cache[v], block, loc);
    x = s.y;
    out.cache.set(k, s.cache_k);
    out.cache.set(v, s.cache_v);
  }
  Tensor h = reshape(final_norm(p, c, x, loc), {b, c.dim}, loc);
  out.logits = project_to_vocab(p, c, h, loc);
  return out;
}

ArrayDict decoder_cache(const DecoderConfig& c, int64_t batch, DType dtype) {
  ArrayDict d;
  for (int64_t i = 0; i < c.layers; ++i) {
    d.set(fmt::format("k{}", i), zeros({batch, kv_heads_of(c), c.context, c.head_dim()}, dtype));
    d.set(fmt::format("v{}", i), zeros({batch, kv_heads_of(c), c.context, c.head_dim()}, dtype));
  }
  return d;
}

}  // namespace fjit
