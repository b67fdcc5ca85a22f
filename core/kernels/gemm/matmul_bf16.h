// Internal: the matmul op on bf16 operands (result f32), for select_matmul (matmul.cc).
//
// Every product of two bf16 values is exact in f32; the sums are f32 (bf16_gemm.h: AVX512_BF16
// dot products where the CPU has them, the widening path otherwise, FJIT_ISA=avx2 included).
// A transposed A is read in place; a transposed B is copied into row-major order first. The work is cut into batch
// entries and blocks of output rows whose size depends on the shape only (a multiple of the
// micro-kernel's rows); intra-op threads take whole blocks, so the bits do not depend on the
// thread count.
#pragma once

#include "core/kernels/families.h"

namespace fjit::kernels::st {

// Requires Instr::p filled as select_matmul's plan_gemm does and bf16 operands; sets instr.fn.
bool select_bf16_matmul(Instr& instr);

}  // namespace fjit::kernels::st
