// Internal: the matmul op on bf16 operands (result f32), for select_matmul (matmul.cc).
//
// Every product of two bf16 values is exact in f32; the sums are f32 (bf16_gemm.h: AVX512_BF16
// dot products where the CPU has them, the widening path otherwise, FJIT_ISA=avx2 included).
// Transposed operands are read in place; op(B) is packed (or, on the widening path, widened
// to f32) once per batch entry and shared by its row blocks. The work is cut into batch entries
// and blocks of output rows (a multiple of the micro-kernel's rows); a row's arithmetic does
// not depend on its block, and intra-op threads take whole blocks, so the bits depend on the
// shapes only: not on the thread count, nor on a step deadline. Under a deadline
// (core/base/step_deadline.h) the blocks are smaller, so the deadline is asked at a bounded
// interval, and the blocks left after it passes are skipped.
#pragma once

#include <cstdint>

#include "core/kernels/families.h"

namespace fjit::kernels::st {

// Products at most this many columns wide (and fewer than their rows) run transposed on
// AVX512_BF16, C^T = op(B)^T op(A)^T, so that their columns fill the 12-row tile's rows.
inline constexpr int64_t kNarrowBf16 = 16;

// One product C [m, n] = op(A) op(B) as the op computes it (the same bits, on up to
// intra_op_threads() threads): op(A) from A [m, k] or, ta, stored [k, m]; op(B) from B [k, n]
// or, tb, stored [n, k].
void bf16_matmul(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                 const uint16_t* b, float* c);

// Requires Instr::p filled as select_matmul's plan_gemm does and bf16 operands; sets instr.fn.
bool select_bf16_matmul(Instr& instr);

}  // namespace fjit::kernels::st
