// The packed GEMM's panel packing (packed_gemm.cc): op(A) and op(B) copied into the slivers
// the micro-kernels read (ukernel.h), row by row or transposed, zero past the operand's edge.
// Copies only: no arithmetic, so the packing never changes a product's bits.
#pragma once

#include <cstdint>

namespace fjit::gemm {

// A panel whose packed rows run along the source's rows: dst[p * w + r] = src[r * lds + p]
// for r < rows (zero for rows <= r < w), p < kc.
void pack_across(const float* src, int64_t lds, int64_t rows, int64_t kc, float* dst, int64_t w);

// A panel whose packed rows are the source's rows: dst[p * w + j] = src[p * lds + j] for
// j < cols (zero for cols <= j < w), p < kc.
void pack_along(const float* src, int64_t lds, int64_t cols, int64_t kc, float* dst, int64_t w);

}  // namespace fjit::gemm
