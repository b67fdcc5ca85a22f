// Rotary position embedding (RoPE): each pair of features of a query or key rotated by an
// angle proportional to its position, so that q . k depends on the positions only through
// their difference. No parameters.
#pragma once

#include "core/trace/ops.h"

namespace fjit {

// x [B, T, H, dh] (dh even) at integer positions [T] (i32; a traced Tensor, so a decode step
// at a traced position does not re-trace). The "rotate half" convention of GPT-NeoX and
// Hugging Face's Llama: with h = dh / 2, theta_i = position * base^(-2 i / dh) for i < h,
//   out[i]     = x[i] cos(theta_i) - x[i + h] sin(theta_i)
//   out[i + h] = x[i + h] cos(theta_i) + x[i] sin(theta_i)
// computed in x's dtype.
Tensor rotary_embedding(const Tensor& x, const Tensor& positions, double base = 10000.0,
                        Loc loc = Loc::current());

}  // namespace fjit
