// Embedding: rows of a learned table picked by token id.
//
// Parameter: "<name>/table" [vocab, dim]. The lookup is `gather` along axis 0, so its
// gradient is gather's VJP (a scatter_add of the cotangent rows into a zero table); ids
// outside [0, vocab) are clamped, and reported by the automatic index check when checks are
// on (FJIT_CHECKS=all).
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/array.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

// ids i32 [...] -> [..., dim], in the table's dtype; a bf16 or f16 table gives f32 rows (the
// rows gathered, then cast).
Tensor embedding(const Params& p, const std::string& name, const Tensor& ids,
                 Loc loc = Loc::current());
// Its parameter, added to `d`: the table drawn from N(0, 1 / dim) with `seed` (so that an
// embedding row has about unit norm, as Flax's default variance scaling gives).
void embedding_params(ArrayDict& d, const std::string& name, int64_t vocab, int64_t dim,
                      uint64_t seed, DType dtype = DType::f32);

}  // namespace fjit
