// fjit's own packed f32 GEMM on micro-kernels chosen for the CPU at run time (ukernel.h,
// core/base/isa.h), BLIS-style: op(B) is packed once into slivers of NR columns per depth
// block, op(A) into slivers of MR rows per unit of work, and every output tile, edge tiles
// included (through a padded panel and a temporary tile), goes through the same micro-kernel.
//
// Rounding: each element of C is the kernel's sum over each depth block (blocks fixed by K and
// the instruction set), added to C block after block in order of depth. Threads take whole
// units of output tiles and never split the depth, so the bits depend on the shapes and the data
// only: never on the thread count, nor (ukernel.h) on the instruction set. They may differ in
// the last bits from the other GEMM paths (BLIS, the Eigen-based driver).
#pragma once

#include <cstdint>

#include "core/base/isa.h"
#include "core/kernels/kernel.h"

namespace fjit {

// C [m, n] (row-major, leading dimension n) = (accumulate ? C : 0) + op(A) op(B), with A
// row-major [m, k] (ta: [k, m], used transposed) and B [k, n] (tb: [n, k]), on up to
// `threads` threads, with the micro-kernel of `isa`. REQUIRES: isa <= detected_isa().
void packed_sgemm(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                  const float* b, float* c, bool accumulate, int threads);

// Process-wide, which plain f32 products compile to the packed GEMM (matmul.cc):
//   never              FJIT_GEMM=eigen: fjit's Eigen-based driver;
//   without_library    the default: BLIS where it is used (gemm_library.h), else this;
//   always             FJIT_GEMM=fjit, even where BLIS has kernels for the CPU.
enum class PackedGemmUse { never, without_library, always };
void set_packed_gemm_use(PackedGemmUse use);
PackedGemmUse packed_gemm_use();

// "fjit packed GEMM, avx512 12x32 kernel".
const char* packed_gemm_name();

// Prepares out[m, n] = op(A) op(B) (a plain f32 MatMul: instr.ins = {A, B}, A possibly
// [batch, M, K] folded into m rows) on the packed GEMM with the active ISA's kernel. False,
// with instr.fn untouched, for another dtype or a product too small to pay for the packing.
bool select_packed_matmul(Instr& instr, int64_t m, int64_t k, int64_t n);

}  // namespace fjit
