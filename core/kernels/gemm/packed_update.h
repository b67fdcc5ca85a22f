// The f32 GEMM update (fused.h, select_gemm_update) on the packed GEMM (packed_gemm.h):
// out = addend + alpha * op(A) op(B), optionally also writing the product and the sum of its
// squares, all applied to each output tile as the packed driver finishes it
// (TileEpilogue), so the product never goes through memory unless it is asked for.
//
// Rounding: the product P is packed_sgemm's (the bits of the plain f32 product on the packed
// path, for every thread count and both instruction sets), and out = fma(alpha, P, addend),
// one rounding per element, whichever further results are written. The sum of squares is
// summed per tile (in float over short runs, then in double) in a fixed order, the tiles' sums
// added in double in tile order, then rounded to float: within rounding of the unfused
// sum(P * P), and the same for every thread count.
#pragma once

#include <cstdint>

#include "core/kernels/kernel.h"

namespace fjit::gemm_update {

// Instr::p of a GEMM update (gemm_update.cc and this path): p[0] = M, p[1] = K, p[2] = N,
// p[6] = AddendForm (affine_update.h), p[7] = these flags. The Eigen path keeps its blocking in
// p[3..5]; the packed path keeps the Isa in p[3].
//   kWithProduct   the product is written (buffer in_bufs[ins.size()])
//   kWithSum       the sum of its squares is written (the buffer after that)
//   kEpilogue      the update is applied where the product is stored (a sum of squares then
//                  within rounding of the unfused sum, not bit-identical)
//   kAlphaOperand  alpha is the last operand, read when the step runs
//   kUnitAlpha     alpha is 1: a plain product (select_blocked_matmul)
constexpr int64_t kWithProduct = 1, kWithSum = 2, kEpilogue = 4, kAlphaOperand = 8, kUnitAlpha = 16;

// The kernel for trans_a / trans_b, given p as above with p[3] the Isa to run.
KernelFn packed_update_kernel(bool ta, bool tb);

}  // namespace fjit::gemm_update
