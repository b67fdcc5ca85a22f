// The pre-norm transformer block (see core/nn/transformer.h).
#include "core/nn/transformer.h"

#include <fmt/format.h>

#include "core/nn/mlp.h"
#include "core/nn/normalization.h"
#include "core/trace/remat.h"

namespace fjit {
namespace {

using Options = TransformerBlockOptions;

Tensor norm(const Params& p, const std::string& name, const Tensor& x, const Options& o, const Loc& loc) {
  if (o.norm == Options::Norm::kRmsNorm) return rms_norm(p, name, x, o.norm_eps > 0 ? o.norm_eps : 1e-6, loc);
  return layer_norm(p, name, x, o.norm_eps > 0 ? o.norm_eps : 1e-5, loc);
}

Tensor branch(const Options& o, const Tensor& y, int index) {
  return o.residual_branch ? o.residual_branch(y, index) : y;
}

// x + mlp(norm2(x)).
Tensor mlp_half(const Params& p, const std::string& name, const Tensor& x, const Options& o,
                const Loc& loc) {
  Tensor h = norm(p, name + "/norm2", x, o, loc);
  h = o.mlp == Options::Mlp::kSwiglu ? swiglu_mlp(p, name + "/mlp", h, loc)
                                     : gelu_mlp(p, name + "/mlp", h, o.gelu_tanh, loc);
  return add(x, branch(o, h, 1), loc);
}

void require_sequence(const char* layer, const Tensor& x, const Options& o, const Loc& loc) {
  if (!x.defined() || x.rank() != 3 || !is_floating(x.dtype()))
    detail::fail(layer, {x}, "expects a floating-point sequence [batch, tokens, features]", &loc);
  if (!(o.norm_eps >= 0))
    detail::fail(layer, {x}, fmt::format("norm_eps must be positive (or 0: the default), not {}", o.norm_eps), &loc);
}

}  // namespace

Tensor transformer_block(const Params& p, const std::string& name, const Tensor& x,
                         const Options& o, const Tensor& key_lengths, Loc loc) {
  detail::CompositeScope scope("transformer_block", {x, key_lengths});
  require_sequence("transformer_block", x, o, loc);
  auto body = [&](const Tensor& x) {
    Tensor a = multi_head_attention(p, name + "/attn", norm(p, name + "/norm1", x, o, loc),
                                    o.attention, key_lengths, loc);
    return mlp_half(p, name, add(x, branch(o, a, 0), loc), o, loc);
  };
  // Under remat the block's activations are recomputed in the backward pass; the parameters
  // it captures still get their gradients (core/trace/remat.h).
  return o.remat ? remat(body, loc)(x) : body(x);
}

AttentionStep transformer_block_step(const Params& p, const std::string& name, const Tensor& x,
                                     const Tensor& pos, const Tensor& cache_k,
                                     const Tensor& cache_v, const Options& o, Loc loc) {
  detail::CompositeScope scope("transformer_block_step", {x, pos, cache_k, cache_v});
  require_sequence("transformer_block_step", x, o, loc);
  AttentionStep a = multi_head_attention_step(p, name + "/attn", norm(p, name + "/norm1", x, o, loc),
                                              pos, cache_k, cache_v, o.attention, loc);
  return {mlp_half(p, name, add(x, branch(o, a.y, 0), loc), o, loc), a.cache_k, a.cache_v};
}

void transformer_block_params(ArrayDict& d, const std::string& name, int64_t dim, uint64_t seed,
                              const Options& o, Init init, DType dtype) {
  auto norm_params = [&](const std::string& n) {
    if (o.norm == Options::Norm::kRmsNorm) rms_norm_params(d, n, dim, dtype);
    else layer_norm_params(d, n, dim, dtype);
  };
  const int64_t hidden = o.mlp_hidden > 0 ? o.mlp_hidden : 4 * dim;
  norm_params(name + "/norm1");
  multi_head_attention_params(d, name + "/attn", dim, seed, o.attention, init, dtype);
  norm_params(name + "/norm2");
  if (o.mlp == Options::Mlp::kSwiglu) swiglu_mlp_params(d, name + "/mlp", dim, hidden, seed + 2, init, dtype);
  else gelu_mlp_params(d, name + "/mlp", dim, hidden, seed + 2, init, dtype);
}

}  // namespace fjit
