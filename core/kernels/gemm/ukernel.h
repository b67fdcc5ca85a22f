// The GEMM micro-kernels of the packed GEMM (packed_gemm.h), one per instruction set, and
// their blocking. Each kernel computes one MR x NR tile of C from packed panels:
//   c[i * ldc + j] = (add ? c[i * ldc + j] : 0) + sum over p < kc of a[p * MR + i] * b[p * ldb + j]
// (ldb = NR for a packed B sliver; a row-major B [k, n] read in place passes its row length)
// with the sum accumulated from zero by one fused multiply-add per p, in order p = 0, 1, ...,
// and then added to C (one rounding), whatever the tile's place: so each element's arithmetic
// depends on kc and the data only. Every kernel here takes the same kc (the depth blocks are
// then the same), so the AVX2 and AVX-512 kernels give the same bits.
//
// The kernels are compiled per function for their instruction set (target attributes), in
// files that include no templates or inline library code (whose out-of-line copies, compiled
// with the wider set, the linker could pick for the whole program). Call a kernel only where
// active_isa() (core/base/isa.h) allows it.
#pragma once

#include <cstdint>

namespace fjit::gemm {

using TileFn = void (*)(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                        int64_t ldc, bool add);
// The same tile with A read in place from MR rows of a row-major matrix (element (i, p) at
// a[i * lda + p]) instead of a packed panel: the same products summed in the same order, so
// the same bits; it saves packing A where each A sliver meets only a few B slivers.
using RowsTileFn = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float* c, int64_t ldc, bool add);

struct UKernel {
  const char* name;  // "avx2 6x16"
  int mr, nr;        // the tile: MR rows (broadcast from packed A), NR columns (vectors of B)
  int kc;            // the most depth per packed block (packed B sliver kc x NR stays in L1)
  int unit_slivers;  // row slivers a unit of work aims at (packed A block in L2)
  TileFn tile;
  RowsTileFn tile_rows;
};

// The bf16 kernel (bf16_gemm.h), AVX512_BF16 only: a 12 x 32 f32 tile from a and b (per depth
// pair, 32 columns of two bf16 each). Row i's bf16 pair q is the 32 bits at
// a + i * a_row + q * a_pair (uint16 units): packed by slivers (a_row 2, a_pair 24), copied by
// rows (a_row 2 * pairs, a_pair 2) or A read in place (a_row = its row stride, a_pair 2).
using Bf16TileFn = void (*)(int64_t pairs, const uint16_t* a, int64_t a_row, int64_t a_pair,
                            const uint16_t* b, float* c, int64_t ldc, bool add);
Bf16TileFn bf16_tile_avx512();
// Its A packing from a transposed A (op(A)'s rows are neighbouring columns of A's storage),
// in 12-row slivers bf16_sliver_stride(pairs) elements apart: for each pair q < pairs and row
// i < 12 of sliver s < ceil(width / 12), ap[s * stride + q * 12 + i] = a[2q * lda + 12s + i] |
// a[(2q + 1) * lda + 12s + i] << 16, with A's element taken as 0 at a column 12s + i >= width
// or a stored row 2q + 1 >= depth (an odd depth's last pair), neither of which is read.
using Bf16PackATFn = void (*)(int64_t pairs, int64_t depth, const uint16_t* a, int64_t lda,
                              int64_t width, uint32_t* ap);
// A sliver's pairs and four elements of padding, rounded up to whole 64-byte lines.
constexpr int64_t bf16_sliver_stride(int64_t pairs) { return (pairs * 12 + 4 + 15) / 16 * 16; }
Bf16PackATFn bf16_pack_a_trans_avx512();

// The AMX bf16 kernels (bf16_gemm.h's AMX path; call only where active_amx_bf16()).
// amx_begin loads the calling thread's tile configuration (eight 16 x 64-byte tiles) and
// amx_end releases it; the block kernel runs between them, on the same thread.
void amx_begin();
void amx_end();
// A 32 x 32 f32 block over pairs [q_begin, q_end) of the depth (q_begin a multiple of
// block_pairs, q_end a multiple of 16 or pairs16): out[i * ldo + j] (ldo in floats) = init[i *
// 32 + j] (0 when init is null) + the sum over those pairs q of op(A)[i, q] . op(B)[q, j], each
// 16 pairs one tile product (the hardware's sum: products exact, f32 accumulation, subnormal
// inputs and results as zero) added in order.
//   a: op(A)'s 32 rows, row i at a + i * lda (bf16 units), pairs along the row, 2 * pairs16
//      values each (zero past the depth);
//   bp: op(B) packed by bf16_pack_b (bf16_layout.h: depth blocks of block_pairs pairs, pairs16
//      in all, ns slivers of 32 columns); the block reads sliver j.
void amx_block_32x32(int64_t q_begin, int64_t q_end, int64_t pairs16, int64_t block_pairs, const uint16_t* a,
                     int64_t lda, const uint16_t* bp, int64_t ns, int64_t j, const float* init, float* out,
                     int64_t ldo);
// op(A) rows packed for amx_block_32x32 from a transposed A (A stored [k, m]: op(A)'s rows are
// columns of the storage): ap[i * ldp + p] = a[p * lda + i] for i < rows (at most 32) and
// p < k, zero for p up to 2 * pairs16 and for rows up to 32.
void amx_pack_a_trans(int64_t rows, int64_t k, int64_t pairs16, const uint16_t* a, int64_t lda,
                      uint16_t* ap, int64_t ldp);

// f32 kernels: AVX2 + FMA (every CPU fjit runs on), AVX-512 F/BW/VL/DQ, and AVX-512's 8-row
// tile for products whose row count 8 divides with less padding than 12 (packed_gemm.cc
// chooses by the row count alone; the same kc, so the same bits as the 12-row tile).
const UKernel& ukernel_avx2();
const UKernel& ukernel_avx512();
const UKernel& ukernel_avx512_8();

}  // namespace fjit::gemm
