// Multi-head attention over a sequence: a qkv projection, optionally rotary positions, scaled
// dot-product attention with a causal and/or padding mask, an output projection; and its decode
// step over a key/value cache of fixed size.
//
// Parameter names under `name` (H = heads, KV = kv_heads, dh = D / H):
//   "<name>/qkv/w" [D, (H + 2 KV) dh], "<name>/qkv/b" [(H + 2 KV) dh]   queries, keys and
//                                                   values in one product
//   "<name>/out/w" [D, D],  "<name>/out/b" [D]     the heads' outputs mixed back to D
// (no b without a bias). The columns of qkv are the H query heads, then the KV key heads, then
// the KV value heads, each head a block of dh columns (head-major). With KV == H (ordinary
// multi-head attention) that is [D, 3D], (q, k, v) each split into H blocks, as a
// [D, 3, H, dh] reshape of w reads them.
//
// Grouped-query attention (KV < H, Llama 2/3's num_key_value_heads): key/value head j serves
// the G = H / KV query heads [j G, (j + 1) G), as Hugging Face's repeat_kv pairs them.
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
  // (kv_heads, below, must divide heads)
  // Token t attends only to tokens <= t (a language model's decoder).
  bool causal = true;
  // Rotary position embedding (core/nn/rotary.h) of queries and keys at positions 0..T-1
  // (the decode step: at its position); D / heads must be even.
  bool rotary = false;
  bool bias = true;     // the biases of qkv and out
  // Grouped-query attention: kv_heads key/value heads, each shared by heads / kv_heads query
  // heads (Llama's num_key_value_heads); 0 means heads (ordinary multi-head attention).
  int64_t kv_heads = 0;
  double rope_theta = 10000.0;  // the rotary base (Llama's rope_theta); must be positive
};

// x [B, T, D] -> [B, T, D]: per head softmax(q k^T / sqrt(D / heads)) v, then the out
// projection. key_lengths (optional, i32 [B]) masks the padding: keys j >= key_lengths[b] get
// no weight. The attention itself is the fused op dot_product_attention (core/trace/attention.h):
// no [T, T] scores are kept. A query that sees no key at all (key_lengths[b] == 0) gets zeros;
// with automatic checks on, that key length is an attention_key_length check. Options that are
// not a layer (heads not dividing D, kv_heads not dividing heads, with rotary an odd dh or a
// rope_theta <= 0) are TraceErrors naming the layer, x and the call site.
Tensor multi_head_attention(const Params& p, const std::string& name, const Tensor& x,
                            const MultiHeadAttentionOptions& o,
                            const Tensor& key_lengths = Tensor(), Loc loc = Loc::current());

// One decoding step with a key/value cache of fixed size Tmax: x [B, 1, D] is the token at
// position pos (an i32 scalar, traced: the step compiles once for every position); cache_k and
// cache_v [B, KV, Tmax, dh] (KV = o.kv_heads or o.heads, dh = D / o.heads) hold the keys and
// values of positions < pos (with grouped-query attention the cache holds the KV heads only). This token's key and value are written at row pos, and it attends to rows [0, pos]
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

// Its parameters, added to `d`: qkv [D, (H + 2 KV) dh] drawn with `init` from `seed`, out from
// `seed + 1`, zero biases (none when !o.bias). Throws std::invalid_argument when heads do not
// divide dim or kv_heads do not divide heads.
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
