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

// The same with leading dimensions: A's rows (of op(A)'s storage) lda apart, B's ldb, C's ldc.
// The bits are packed_sgemm's for the same values.
void packed_sgemm_strided(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                          int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                          bool accumulate, int threads);

// What the driver does with each finished tile of the product instead of storing it in C:
// apply(ctx, p, ldp, row0, col0, rows, cols, tile) is called once per output tile, on the
// thread that computed it, with p[r * ldp + q] (r < rows, q < cols) the product's element
// (row0 + r, col0 + q), summed over the whole depth exactly as packed_sgemm sums it (so the
// same bits as packed_sgemm with accumulate = false). `tile` numbers the tiles from 0 in row-
// major order of tiles (packed_tile_count): the tiling depends on m, n and the ISA only, never
// on the thread count. Tiles are disjoint; calls for different tiles may run concurrently.
// prefetch, where not null, is called with a tile's place just before its last depth block's
// kernel runs, on the same thread, so that the epilogue's own operands are in cache by then.
struct TileEpilogue {
  void (*apply)(void* ctx, const float* p, int64_t ldp, int64_t row0, int64_t col0, int64_t rows,
                int64_t cols, int64_t tile);
  void* ctx;
  void (*prefetch)(void* ctx, int64_t row0, int64_t col0, int64_t rows, int64_t cols) = nullptr;
};

// The number of tiles TileEpilogue::apply is called for: ceil(m / MR) * ceil(n / NR).
int64_t packed_tile_count(Isa isa, int64_t m, int64_t n);

// op(A) op(B) as packed_sgemm computes it (accumulate = false), each finished tile handed to
// `epi` instead of being stored. REQUIRES: k > 0, isa <= detected_isa().
void packed_sgemm_tiles(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                        const float* b, const TileEpilogue& epi, int threads);

// `batch` products C_i [m, n] = op(A_i) op(B_i), A_i = a + i * sa, B_i = b + i * sb (a stride of
// 0 shares the operand), C_i = c + i * m * n, each as packed_sgemm computes it: threads take
// whole products (or, with fewer products than threads, share each one), so the bits do not
// depend on the thread count.
void packed_sgemm_batched(Isa isa, bool ta, bool tb, int64_t batch, int64_t m, int64_t n, int64_t k,
                          const float* a, int64_t sa, const float* b, int64_t sb, float* c,
                          int threads);

// Whether a product of this size pays for the packing (below it, the other paths are faster).
bool packed_gemm_pays(int64_t m, int64_t n, int64_t k);

// Process-wide, which plain f32 products compile to the packed GEMM (matmul.cc):
//   never              FJIT_GEMM=eigen: fjit's Eigen-based driver;
//   without_library    the default: BLIS where it is used (gemm_library.h), else this;
//   always             FJIT_GEMM=fjit, even where BLIS has kernels for the CPU.
enum class PackedGemmUse { never, without_library, always };
void set_packed_gemm_use(PackedGemmUse use);
PackedGemmUse packed_gemm_use();

// "fjit packed GEMM, avx512 12x32 kernel (avx512 8x32 where it pads less)".
const char* packed_gemm_name();

// Prepares out[m, n] = op(A) op(B) (a plain f32 MatMul: instr.ins = {A, B}, A possibly
// [batch, M, K] folded into m rows) on the packed GEMM with the active ISA's kernel. False,
// with instr.fn untouched, for another dtype or a product too small to pay for the packing.
bool select_packed_matmul(Instr& instr, int64_t m, int64_t k, int64_t n);

// Prepares a batched f32 MatMul planned by matmul.cc (p[0] = M, p[1] = K, p[2] = N, p[3] = the
// batch, p[4] / p[5] = A's / B's batch stride, 0 for an operand shared by every entry) on
// packed_sgemm_batched. False, with instr.fn untouched, for another dtype or products too
// small to pay for the packing.
bool select_packed_batched_matmul(Instr& instr);

}  // namespace fjit
