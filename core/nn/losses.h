// Losses, composites of ops: per-example values, reduced by the caller (mean, sum, masked).
#pragma once

#include "core/trace/ops.h"

namespace fjit {

// Per-example cross entropy of logits [..., C] against integer labels [...] (i32):
// -log_softmax(logits)[label]. A label outside [0, C) scores zero (one_hot of it is all
// zeros); check the labels where that matters.
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Loc loc = Loc::current());

}  // namespace fjit
