// Losses, composites of ops: per-example values, reduced by the caller (mean, sum, masked).
#pragma once

#include "core/trace/ops.h"

namespace fjit {

// Per-example cross entropy of f32 or f64 logits [..., C] against integer labels [...] (i32):
// logsumexp(logits) - logits[label], the fused op softmax_xent (core/trace/ops.h): one
// streaming pass per row, and a backward pass whose only [..., C] buffer is the gradient
// itself. A label outside [0, C) scores zero and gets a zero gradient (a row to ignore); with
// checks on, the automatic check label_out_of_range reports it with its flat row index.
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Loc loc = Loc::current());

}  // namespace fjit
