// The pre-norm transformer block: x + attn(norm1(x)), then + mlp(norm2(x)); and its decode
// step over a key/value cache.
//
// Parameter names under `name`:
//   "<name>/norm1/..."  layer_norm ("g", "b") or rms_norm ("g") [D]
//   "<name>/attn/..."   multi_head_attention's (core/nn/attention.h)
//   "<name>/norm2/..."  as norm1
//   "<name>/mlp/..."    gelu_mlp's or swiglu_mlp's (core/nn/mlp.h), hidden F = mlp_hidden
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/nn/attention.h"

namespace fjit {

struct TransformerBlockOptions {
  MultiHeadAttentionOptions attention;
  enum class Norm { kLayerNorm, kRmsNorm } norm = Norm::kLayerNorm;  // default eps each
  enum class Mlp { kGelu, kSwiglu } mlp = Mlp::kGelu;
  int64_t mlp_hidden = 0;  // F; 0: 4 * D
  double norm_eps = 0;     // 0: each norm's default (layer norm 1e-5, RMS norm 1e-6); < 0: TraceError
  bool gelu_tanh = false;  // the MLP's GELU by its tanh approximation (GPT-2's "gelu_new")
  // Recompute the block's activations in the backward pass instead of keeping them alive
  // from the forward pass (core/trace/remat.h): the same values, less memory, more compute.
  bool remat = false;
  // Applied to each residual branch's output before it is added (index 0: attention, 1: MLP),
  // e.g. dropout with a key per site; empty: the identity.
  std::function<Tensor(const Tensor& branch, int index)> residual_branch;
};

// x [B, T, D] -> [B, T, D]. key_lengths: multi_head_attention's padding mask (i32 [B]).
Tensor transformer_block(const Params& p, const std::string& name, const Tensor& x,
                         const TransformerBlockOptions& o, const Tensor& key_lengths = Tensor(),
                         Loc loc = Loc::current());

// The block at one token, x [B, 1, D] at position pos (i32 scalar), with its attention's
// cache (multi_head_attention_step); returns y [B, 1, D] and the new caches.
AttentionStep transformer_block_step(const Params& p, const std::string& name, const Tensor& x,
                                     const Tensor& pos, const Tensor& cache_k,
                                     const Tensor& cache_v, const TransformerBlockOptions& o,
                                     Loc loc = Loc::current());

// Its parameters, added to `d` in this order: norm1, attn (from `seed` and `seed + 1`), norm2,
// mlp (from `seed + 2` on), drawn with `init`.
void transformer_block_params(ArrayDict& d, const std::string& name, int64_t dim, uint64_t seed,
                              const TransformerBlockOptions& o = {},
                              Init init = Init::glorot_uniform, DType dtype = DType::f32);

}  // namespace fjit
