// Multi-head attention over a sequence: a qkv projection, optionally rotary positions, scaled
// dot-product attention with a causal and/or padding mask, an output projection; and its decode
// step over a key/value cache of fixed size.
//
// Parameter names under `name`:
//   "<name>/qkv/w" [D, 3D], "<name>/qkv/b" [3D]   queries, keys and values in one product
//   "<name>/out/w" [D, D],  "<name>/out/b" [D]     the heads' outputs mixed back to D
// (no b without a bias). The 3D columns of qkv are (q, k, v) in that order, each split into
// `heads` blocks of D / heads (head-major), as a [D, 3, heads, D / heads] reshape of w reads
// them.
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/array.h"
#include "core/lib/initializers.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

struct MultiHeadAttentionOptions {
  int64_t heads = 1;    // must divide D
  // Token t attends only to tokens <= t (a language model's decoder).
  bool causal = true;
  // Rotary position embedding (core/nn/rotary.h) of queries and keys at positions 0..T-1
  // (the decode step: at its position); D / heads must be even.
  bool rotary = false;
  bool bias = true;     // the biases of qkv and out
  // Grouped-query attention: kv_heads key/value heads, each shared by heads / kv_heads query
  // heads (Llama's num_key_value_heads); 0 means heads (ordinary multi-head attention).
  int64_t kv_heads = 0;
  double rope_theta = 10000.0;  // the rotary base (Llama's rope_theta)
};

// x [B, T, D] -> [B, T, D]: per head softmax(q k^T / sqrt(D / heads)) v, then the out
// projection. key_lengths (optional, i32 [B]) masks the padding: keys j >= key_lengths[b] get
// no weight. The attention itself is the fused op dot_product_attention (core/trace/attention.h):
// no [T, T] scores are kept. A query that sees no key at all (key_lengths[b] == 0) gets zeros;
// with automatic checks on, that key length is an attention_key_length check.
Tensor multi_head_attention(const Params& p, const std::string& name, const Tensor& x,
                            const MultiHeadAttentionOptions& o,
                            const Tensor& key_lengths = Tensor(), Loc loc = Loc::current());

// One decoding step with a key/value cache of fixed size Tmax: x [B, 1, D] is the token at
// position pos (an i32 scalar, traced: the step compiles once for every position); cache_k and
// cache_v [B, H, Tmax, dh] (H = o.heads, dh = D / H) hold the keys and values of positions
// < pos. This token's key and value are written at row pos, and it attends to rows [0, pos]
// (o.causal is implied). With the same parameters, feeding a sequence token by token gives
// multi_head_attention's causal outputs. Requires 0 <= pos < Tmax (a row outside is written
// nowhere).
struct AttentionStep {
  Tensor y;        // [B, 1, D]
  Tensor cache_k;  // the caches with row pos written
  Tensor cache_v;
};
AttentionStep multi_head_attention_step(const Params& p, const std::string& name, const Tensor& x,
                                        const Tensor& pos, const Tensor& cache_k,
                                        const Tensor& cache_v, const MultiHeadAttentionOptions& o,
                                        Loc loc = Loc::current());

// Its parameters, added to `d`: qkv drawn with `init` from `seed`, out from `seed + 1`, zero
// biases (none when !o.bias).
void multi_head_attention_params(ArrayDict& d, const std::string& name, int64_t dim,
                                 uint64_t seed, const MultiHeadAttentionOptions& o = {},
                                 Init init = Init::glorot_uniform, DType dtype = DType::f32);

// The earlier interface, kept: multi_head_attention with biases, no rotary, non-causal by
// default, the same parameters.
struct AttentionOptions {
  int64_t heads = 1;
  bool causal = false;
};
Tensor self_attention(const Params& p, const std::string& name, const Tensor& h,
                      const AttentionOptions& options = {}, Loc loc = Loc::current());
void self_attention_params(ArrayDict& d, const std::string& name, int64_t dim, uint64_t seed,
                           Init init = Init::glorot_uniform, DType dtype = DType::f32);

}  // namespace fjit
