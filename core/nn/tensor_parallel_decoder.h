// The language model's block and forward pass (core/nn/transformer.h, core/nn/decoder.h) split
// over a mesh's model axis from the tensor-parallel layers (core/nn/tensor_parallel.h), for
// use inside shard_map (parallel/shard_map.h; tp_decoder_spec in
// parallel/tensor_parallel_spec.h gives the specs of the split parameters).
//
// Each block's attention is split over heads (tp_attention) and its MLP over the hidden
// features (tp_gelu_mlp or tp_swiglu_mlp); its norms, the token and position tables, the final
// norm and the head are replicated (every replica of the axis holds them whole and computes
// them alike). Every configuration DecoderConfig allows is supported (layer or RMS norm, GELU
// or SwiGLU, learned or rotary positions, grouped-query attention, tied or untied head, remat)
// where the axis's size divides the heads, the kv heads and the MLP's hidden size. With the same
// parameters (tp_decoder_params) the results equal the unsplit model's up to the order of the
// sums that the split changes.
#pragma once

#include <string>

#include "core/ir/array.h"
#include "core/nn/decoder.h"
#include "core/nn/transformer.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

// transformer_block split over `axis`: x [B, T, D] (the same on every replica of the axis) ->
// [B, T, D] (the same on every replica). Parameters as transformer_block's under `name`, with
// "<name>/attn/..." in tp_attention's names.
Tensor tp_transformer_block(const Params& p, const std::string& name, const Tensor& x,
                            const std::string& axis, const TransformerBlockOptions& o,
                            const Tensor& key_lengths = Tensor(), Loc loc = Loc::current());

// decoder_logits with every block split over `axis`: logits [B, T, vocab], the same on every
// replica of the axis.
Tensor tp_decoder_logits(const Params& p, const DecoderConfig& c, const Tensor& ids, const std::string& axis,
                         Loc loc = Loc::current());

// One decoding step of tp_transformer_block (transformer_block_step split over `axis`): x
// [B, 1, D] at position pos, this replica's caches [B, KV / n, Tmax, dh] (tp_attention_step).
// Returns y [B, 1, D] (the same on every replica of the axis) and the caches with row pos
// written. The block's collectives are training's: one psum joins the attention's heads and
// one the MLP's hidden features.
AttentionStep tp_transformer_block_step(const Params& p, const std::string& name, const Tensor& x, const Tensor& pos,
                                        const Tensor& cache_k, const Tensor& cache_v, const std::string& axis,
                                        const TransformerBlockOptions& o, Loc loc = Loc::current());

// decoder_step with every block split over `axis`: ids i32 [B, 1] at position pos (i32
// scalar), `cache` this replica's "k<i>", "v<i>" [B, KV / n, context, head_dim] (the heads it
// holds; tp_decoder_cache_spec in parallel/tensor_parallel_spec.h splits decoder_cache's dict
// so). Returns the logits [B, vocab] (the same on every replica of the axis) and the caches
// with this token's keys and values at row pos. With the same parameters
// (tp_decoder_params) the logits equal decoder_step's up to the order of the sums that the
// split changes.
DecoderStep tp_decoder_step(const Params& p, const DecoderConfig& c, const Tensor& ids, const Tensor& pos,
                            const TensorDict& cache, const std::string& axis, Loc loc = Loc::current());

// decoder_params' dict with each block's attention in tp_attention's names
// (tp_attention_params); other entries copied. Throws std::invalid_argument when a block's
// "attn/qkv/w" is missing.
ArrayDict tp_decoder_params(const ArrayDict& params, const DecoderConfig& c);

}  // namespace fjit
