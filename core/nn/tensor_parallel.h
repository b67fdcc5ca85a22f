// Tensor-parallel layers (Megatron-LM's split): inside shard_map (parallel/shard_map.h) on a
// mesh with a model axis, each replica holds a block of a layer's weights and computes its
// part; one psum over the axis joins the parts. x is the same on every replica of the axis,
// and so are the results.
//
//   tp_gelu_mlp   gelu_mlp's parameter names (core/nn/mlp.h), each replica holding the blocks
//                 that shard_map specs give it: "fc/w" [D, F] split by columns
//                 ({"", axis}), "fc/b" [F] ({axis}), "proj/w" [F, D] split by rows
//                 ({axis, ""}), "proj/b" [D] whole (replicated).
//   tp_swiglu_mlp swiglu_mlp's names: "gate/w", "up/w" [D, F] split by columns ({"", axis}),
//                 "down/w" [F, D] split by rows ({axis, ""}).
//   tp_attention  heads split over the axis. Parameters "<name>/q/w" [D, H dh],
//                 "<name>/k/w", "<name>/v/w" [D, KV dh] split by columns ({"", axis}), their
//                 biases ({axis}), "<name>/out/w" [H dh, D] split by rows ({axis, ""}),
//                 "out/b" [D] whole. tp_attention_params converts multi_head_attention's
//                 parameters (core/nn/attention.h) to these names. With grouped-query
//                 attention each replica holds KV / n key/value heads and the H / n query
//                 heads they serve; with rotary positions every replica rotates its heads at
//                 the same positions 0..T-1.
//
// Gradients: tp_copy and tp_reduce are Megatron's f and g. f is the identity forward and a
// psum of the cotangents backward (x feeds every replica's block); g is the psum forward and the
// identity backward (each replica's block owns its part). So with a loss computed alike on
// every replica of the axis, each replica's gradient of its weight block is that block of the
// unsplit layer's gradient, and the gradients of replicated values (x, "proj/b") are whole.
#pragma once

#include <string>

#include "core/ir/array.h"
#include "core/nn/attention.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

// Megatron's f: x forward, psum(cotangent, axis) backward.
Tensor tp_copy(const Tensor& x, const std::string& axis, Loc loc = Loc::current());
// Megatron's g: psum(x, axis) forward, the cotangent itself backward.
Tensor tp_reduce(const Tensor& x, const std::string& axis, Loc loc = Loc::current());

// x [..., D] -> [..., D]: gelu_mlp split over `axis` (F must be a multiple of its size, which
// shard_map's specs check).
Tensor tp_gelu_mlp(const Params& p, const std::string& name, const Tensor& x, const std::string& axis,
                   bool tanh_approximation = false, Loc loc = Loc::current());

// x [..., D] -> [..., D]: swiglu_mlp split over `axis` (F a multiple of its size).
Tensor tp_swiglu_mlp(const Params& p, const std::string& name, const Tensor& x, const std::string& axis,
                     Loc loc = Loc::current());

// x [B, T, D] -> [B, T, D]: multi_head_attention with o.heads heads in all, heads / n on each of
// the axis's n replicas, and kv_heads / n key/value heads. n must divide o.heads and the kv
// heads (o.kv_heads, or o.heads when 0); options that do not fit are TraceErrors naming
// tp_attention, the heads and the axis.
Tensor tp_attention(const Params& p, const std::string& name, const Tensor& x, const std::string& axis,
                    const MultiHeadAttentionOptions& o, const Tensor& key_lengths = Tensor(),
                    Loc loc = Loc::current());

// One decoding step of tp_attention with a key/value cache (multi_head_attention_step split
// over `axis`): x [B, 1, D] at position pos (an i32 scalar), this replica's caches cache_k and
// cache_v [B, KV / n, Tmax, dh] holding its key/value heads' rows of positions < pos. Writes
// this token's keys and values at row pos, attends over rows [0, pos], and joins the replicas'
// out projections with one psum: y [B, 1, D], the same on every replica of the axis. The
// checks and errors are tp_attention's, and the caches' shapes are checked, naming
// tp_attention_step.
AttentionStep tp_attention_step(const Params& p, const std::string& name, const Tensor& x, const Tensor& pos,
                                const Tensor& cache_k, const Tensor& cache_v, const std::string& axis,
                                const MultiHeadAttentionOptions& o, Loc loc = Loc::current());

// multi_head_attention's parameters under `name` ("qkv/w" [D, (H + 2 KV) dh] ...) as
// tp_attention's ("q/w" [D, D], "k/w" and "v/w" [D, KV dh], the biases alike; "out/..."
// unchanged); other entries of `mha` are copied. H dh is D, qkv/w's rows. Throws
// std::invalid_argument when "<name>/qkv/w" is missing or its columns are not D + 2 KV dh.
ArrayDict tp_attention_params(const ArrayDict& mha, const std::string& name);

}  // namespace fjit
