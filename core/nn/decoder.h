// A decoder-only language model (GPT-style by default, Llama-style by options) built from the
// layers of this folder: token embedding, positions (a learned table, or rotary inside
// attention), `layers` pre-norm transformer blocks with causal attention, a final norm, and
// logits through the token table (tied) or a head of its own.
//
// Parameters (decoder_params adds them in this order):
//   "tok/table" [vocab, dim]                       token embedding
//   "pos/table" [context, dim]                     learned positions (absent with rotary)
//   "block<i>/..." for i in [0, layers)            transformer_block's (core/nn/transformer.h)
//   "norm/g", "norm/b" (layer norm) or "norm/g" (RMS norm)
//   "head/w" [dim, vocab]                          only when !tied_embeddings
// Initialization (GPT-2's scheme): weights N(0, 0.02^2), the projections that write into the
// residual stream (attention out, MLP proj/down) N(0, (0.02 / sqrt(2 layers))^2), biases 0,
// norm gains 1.
//
// decoder_step is one token of generation with a KV cache of fixed size [B, KV, context, dh]
// per layer (KV = kv_heads, or heads), so every step after the first runs the same compiled
// plan whatever the position.
//
// Hugging Face's models as configurations: GPT-2 is the default style with gelu_tanh and
// norm_eps 1e-5 (tied embeddings, biases); Llama is rotary, RMS norm, SwiGLU, no attention
// bias, untied, with its kv_heads, rope_theta and norm_eps (rms_norm_eps). Parameters may be
// stored as bf16 or f16: every layer reads them through weight() (core/nn/linear.h), so the
// model computes in f32 (the caches are then f32). A LoRA adapter (core/nn/lora.h) on any of
// the linear layers, the head included, applies wherever the layer is used.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/array.h"
#include "core/nn/transformer.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

struct DecoderConfig {
  int64_t vocab = 256;
  int64_t context = 256;   // longest sequence (the positions table, the KV cache)
  int64_t dim = 384;
  int64_t layers = 6;
  int64_t heads = 6;
  int64_t mlp_hidden = 0;  // 0: 4 * dim
  int64_t kv_heads = 0;    // grouped-query attention's key/value heads; 0: heads
  bool attention_bias = true;  // biases on qkv and out (GPT-2: yes, Llama: no)
  double norm_eps = 0;     // every norm's epsilon; 0: the norm's default
  double rope_theta = 10000.0;
  bool gelu_tanh = false;  // GPT-2's tanh-approximated GELU
  bool rotary = false;     // rotary positions instead of a learned table
  bool tied_embeddings = true;
  bool remat = false;      // recompute each block's activations in the backward pass
  TransformerBlockOptions::Norm norm = TransformerBlockOptions::Norm::kLayerNorm;
  TransformerBlockOptions::Mlp mlp = TransformerBlockOptions::Mlp::kGelu;

  TransformerBlockOptions block() const;
  int64_t head_dim() const { return dim / heads; }
  // "6 layers, d 384, 6 heads, context 256, vocab 256, learned positions, gelu, layer norm";
  // kv heads, "gelu (tanh)", no attention bias, norm eps and rope theta only when not default.
  std::string describe() const;
};

// Throws std::invalid_argument when the configuration is not a model (heads not dividing dim,
// kv_heads not dividing heads, an odd head size with rotary, a non-positive size, a negative
// norm_eps, a rope_theta <= 0).
void validate(const DecoderConfig& c);

// Adds the parameters (above) to `d`, drawn from `seed`.
void decoder_params(ArrayDict& d, const DecoderConfig& c, uint64_t seed, DType dtype = DType::f32);
int64_t parameter_count(const ArrayDict& params);

// Logits [B, T, vocab] of token ids i32 [B, T] (T <= context), each position seeing only
// itself and earlier ones.
Tensor decoder_logits(const Params& p, const DecoderConfig& c, const Tensor& ids,
                      Loc loc = Loc::current());

// One token per sequence: ids i32 [B, 1] at position pos (i32 scalar, < context), the caches
// "k<i>", "v<i>" [B, kv_heads (or heads), context, head_dim] of every layer. Returns the logits [B, vocab] of
// the next token and the caches with this token's keys and values written at row pos.
struct DecoderStep {
  Tensor logits;
  TensorDict cache;
};
DecoderStep decoder_step(const Params& p, const DecoderConfig& c, const Tensor& ids,
                         const Tensor& pos, const TensorDict& cache, Loc loc = Loc::current());
// Zero caches for `batch` sequences, in the layout decoder_step takes.
ArrayDict decoder_cache(const DecoderConfig& c, int64_t batch, DType dtype = DType::f32);

}  // namespace fjit
