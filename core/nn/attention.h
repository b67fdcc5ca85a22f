// Multi-head self-attention over a sequence, built from linear layers, matrix products and
// softmax.
//
// Parameter names under `name`:
//   "<name>/qkv/w" [D, 3D], "<name>/qkv/b" [3D]   queries, keys and values in one product
//   "<name>/out/w" [D, D],  "<name>/out/b" [D]     the heads' outputs mixed back to D
// The 3D columns of qkv are (q, k, v) in that order, each split into `heads` blocks of
// D / heads (head-major), as a [D, 3, heads, D / heads] reshape of w reads them.
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/array.h"
#include "core/lib/initializers.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

struct AttentionOptions {
  int64_t heads = 1;    // must divide D
  // Position t attends only to positions <= t (a language model's decoder); the masked
  // scores are set to -1e9 before the softmax, so their weights are exactly zero in f32.
  bool causal = false;
};

// h [B, T, D] -> [B, T, D]: softmax(q k^T / sqrt(D / heads)) v per head, then the out layer.
Tensor self_attention(const Params& p, const std::string& name, const Tensor& h,
                      const AttentionOptions& options = {}, Loc loc = Loc::current());
// Its parameters, added to `d`: qkv drawn with `init` from `seed`, out from `seed + 1`,
// zero biases.
void self_attention_params(ArrayDict& d, const std::string& name, int64_t dim, uint64_t seed,
                           Init init = Init::glorot_uniform, DType dtype = DType::f32);

}  // namespace fjit
