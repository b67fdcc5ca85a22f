// bf16 x bf16 -> f32 products: C [m, n] (row-major) = (accumulate ? C : 0) + A B with A [m, k]
// and B [k, n] row-major bf16 (the upper 16 bits of an f32), accumulated in f32. Three paths,
// chosen by the instruction sets in use (core/base/isa.h):
//   AMX (active_amx_bf16()): 32 x 32 blocks of tile products, each 16 depth pairs one
//            TDPBF16PS (products exact, the hardware's f32 sums, subnormal inputs and results
//            as zero), the whole depth in one accumulator and then added to C;
//   AVX512_BF16 (active_avx512_bf16()): a 12 x 32 micro-kernel on _mm512_dpbf16_ps, which
//            multiplies pairs along K and adds both products to the f32 accumulator in one step
//            (the hardware's rounding of that pair sum), per depth block of 128 pairs;
//   otherwise: each operand widened to f32 (exact: every bf16 is an f32) and fjit's packed
//            f32 GEMM (packed_gemm.h): every product exact, each added with one rounding.
// The paths agree to f32 accumulation error, not bit for bit (the dot-product instructions also
// treat subnormal inputs and results as zero). One thread (the matmul op, core/kernels/gemm/matmul_bf16.h, splits the rows). Each element's
// arithmetic depends on K and its path only, never on its place in a tile or block: bits
// depend on the shapes, the data and the path only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/base/scratch.h"

namespace fjit {

void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b, float* c,
               bool accumulate);
// The same with op(A) [m, k] read from A row-major with row stride lda, or with trans_a from
// A^T, A stored [k, m] with row stride lda (a block of a matmul's rows, a transposed operand).
// Bits as bf16_gemm's on the same values.
void bf16_gemm_ex(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
                  const uint16_t* b, float* c, bool accumulate);
// op(B) [k, n] packed once for several products on it (the AVX512_BF16 and AMX paths only:
// callers check active_avx512_bf16()): B row-major [k, n] with row stride ldb, or with trans_b B stored
// [n, k] with row stride ldb. bp holds bf16_packed_b_size(n, k) elements, 64-byte aligned.
// bf16_gemm_packed_b then multiplies op(A) (as bf16_gemm_ex) by it: the same bits as
// bf16_gemm_ex on the same values.
int64_t bf16_packed_b_size(int64_t n, int64_t k);
void bf16_pack_b(int64_t n, int64_t k, const uint16_t* b, int64_t ldb, bool trans_b, uint16_t* bp);
// bf16_pack_b in parts (for threads): op(B)'s depth is packed in bf16_pack_b_blocks(k) blocks,
// and bf16_pack_b_part packs blocks [first, last) into the very places bf16_pack_b would.
int64_t bf16_pack_b_blocks(int64_t k);
void bf16_pack_b_part(int64_t n, int64_t k, const uint16_t* b, int64_t ldb, bool trans_b, uint16_t* bp,
                      int64_t first, int64_t last);
void bf16_gemm_packed_b(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                        bool trans_a, const uint16_t* bp, float* c, bool accumulate);
// The same for C's columns [col_begin, col_end) alone (both multiples of 32, or col_end n; C's row
// stride stays n), so that threads may split a product's columns: the same bits as those
// columns of bf16_gemm_packed_b.
void bf16_gemm_packed_b_columns(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
                                const uint16_t* bp, float* c, bool accumulate, int64_t col_begin, int64_t col_end);
// On the AMX path only (callers check active_amx_bf16()): C's columns [col_begin, col_end) (both
// multiples of 32, or col_end n; C's row stride stays n) = op(A) op(B), with op(B) read as stored
// (B row-major [k, n] with row stride ldb, or with trans_b stored [n, k]) and packed one depth
// panel at a time into a buffer that stays in cache: the same bits as bf16_gemm_packed_b_columns
// on the whole packed op(B).
void bf16_gemm_amx_streamed(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
                            const uint16_t* b, int64_t ldb, bool trans_b, float* c, int64_t col_begin,
                            int64_t col_end);
// Whether bf16_gemm_amx_streamed runs more than one depth panel for depth k (below that it
// packs op(B) whole, as bf16_pack_b does, and gains nothing).
bool bf16_amx_streams(int64_t k);
// The same product forced onto the widening path (tests compare the two).
void bf16_gemm_widened(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b,
                       float* c, bool accumulate);
void bf16_gemm_widened_ex(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                          bool trans_a, const uint16_t* b, float* c, bool accumulate);

}  // namespace fjit
