// The AVX-512 f32 micro-kernels (ukernel.h): a 12 x 32 tile in 24 zmm accumulators, and an
// 8 x 32 one in 16 for row counts that 12 divides badly (64, 128: ukernel_avx512_8); per row
// and step, two vectors of B and a broadcast of A (folded into the fma's memory operand).
// Intrinsics only: no templates, no inline library functions (ukernel.h says why).
#include <immintrin.h>

#include "core/kernels/gemm/tile_macros.h"
#include "core/kernels/gemm/ukernel.h"

namespace fjit::gemm {
namespace {

constexpr int kMr = 12, kMr8 = 8, kNr = 32;

#define FJIT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

// One row of the tile: acc_r0/acc_r1 += a[r] * (b0, b1).
#define FJIT_ROW(r)                                  \
  x = _mm512_set1_ps(a[r]);                          \
  c##r##_0 = _mm512_fmadd_ps(x, b0, c##r##_0);       \
  c##r##_1 = _mm512_fmadd_ps(x, b1, c##r##_1);

#define FJIT_ROW_AT(r, value)                        \
  x = _mm512_set1_ps(value);                         \
  c##r##_0 = _mm512_fmadd_ps(x, b0, c##r##_0);       \
  c##r##_1 = _mm512_fmadd_ps(x, b1, c##r##_1);

FJIT_AVX512 void tile_12x32(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                            int64_t ldc, bool add) {
  FJIT_ZERO(0) FJIT_ZERO(1) FJIT_ZERO(2) FJIT_ZERO(3) FJIT_ZERO(4) FJIT_ZERO(5)
  FJIT_ZERO(6) FJIT_ZERO(7) FJIT_ZERO(8) FJIT_ZERO(9) FJIT_ZERO(10) FJIT_ZERO(11)
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    __m512 x;
    FJIT_ROW(0) FJIT_ROW(1) FJIT_ROW(2) FJIT_ROW(3) FJIT_ROW(4) FJIT_ROW(5)
    FJIT_ROW(6) FJIT_ROW(7) FJIT_ROW(8) FJIT_ROW(9) FJIT_ROW(10) FJIT_ROW(11)
    a += kMr;
    b += ldb;
  }
  FJIT_STORE(0) FJIT_STORE(1) FJIT_STORE(2) FJIT_STORE(3) FJIT_STORE(4) FJIT_STORE(5)
  FJIT_STORE(6) FJIT_STORE(7) FJIT_STORE(8) FJIT_STORE(9) FJIT_STORE(10) FJIT_STORE(11)
}

// A read in place: rows 3q .. 3q + 2 at aq[0], aq[lda], aq[2 * lda].
FJIT_AVX512 void tile_12x32_rows(int64_t kc, const float* a, int64_t lda, const float* b,
                                 int64_t ldb, float* c, int64_t ldc, bool add) {
  FJIT_ZERO(0) FJIT_ZERO(1) FJIT_ZERO(2) FJIT_ZERO(3) FJIT_ZERO(4) FJIT_ZERO(5)
  FJIT_ZERO(6) FJIT_ZERO(7) FJIT_ZERO(8) FJIT_ZERO(9) FJIT_ZERO(10) FJIT_ZERO(11)
  const float *a0 = a, *a3 = a + 3 * lda, *a6 = a + 6 * lda, *a9 = a + 9 * lda;
  const int64_t l1 = lda, l2 = 2 * lda;
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    __m512 x;
    FJIT_ROW_AT(0, a0[0]) FJIT_ROW_AT(1, a0[l1]) FJIT_ROW_AT(2, a0[l2])
    FJIT_ROW_AT(3, a3[0]) FJIT_ROW_AT(4, a3[l1]) FJIT_ROW_AT(5, a3[l2])
    FJIT_ROW_AT(6, a6[0]) FJIT_ROW_AT(7, a6[l1]) FJIT_ROW_AT(8, a6[l2])
    FJIT_ROW_AT(9, a9[0]) FJIT_ROW_AT(10, a9[l1]) FJIT_ROW_AT(11, a9[l2])
    ++a0, ++a3, ++a6, ++a9;
    b += ldb;
  }
  FJIT_STORE(0) FJIT_STORE(1) FJIT_STORE(2) FJIT_STORE(3) FJIT_STORE(4) FJIT_STORE(5)
  FJIT_STORE(6) FJIT_STORE(7) FJIT_STORE(8) FJIT_STORE(9) FJIT_STORE(10) FJIT_STORE(11)
}

FJIT_AVX512 void tile_8x32(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                           int64_t ldc, bool add) {
  FJIT_ZERO(0) FJIT_ZERO(1) FJIT_ZERO(2) FJIT_ZERO(3) FJIT_ZERO(4) FJIT_ZERO(5)
  FJIT_ZERO(6) FJIT_ZERO(7)
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    __m512 x;
    FJIT_ROW(0) FJIT_ROW(1) FJIT_ROW(2) FJIT_ROW(3) FJIT_ROW(4) FJIT_ROW(5) FJIT_ROW(6) FJIT_ROW(7)
    a += kMr8;
    b += ldb;
  }
  FJIT_STORE(0) FJIT_STORE(1) FJIT_STORE(2) FJIT_STORE(3) FJIT_STORE(4) FJIT_STORE(5)
  FJIT_STORE(6) FJIT_STORE(7)
}

// A read in place: rows 2q, 2q + 1 at aq[0], aq[lda].
FJIT_AVX512 void tile_8x32_rows(int64_t kc, const float* a, int64_t lda, const float* b,
                                int64_t ldb, float* c, int64_t ldc, bool add) {
  FJIT_ZERO(0) FJIT_ZERO(1) FJIT_ZERO(2) FJIT_ZERO(3) FJIT_ZERO(4) FJIT_ZERO(5)
  FJIT_ZERO(6) FJIT_ZERO(7)
  const float *a0 = a, *a2 = a + 2 * lda, *a4 = a + 4 * lda, *a6 = a + 6 * lda;
  const int64_t l1 = lda;
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    __m512 x;
    FJIT_ROW_AT(0, a0[0]) FJIT_ROW_AT(1, a0[l1]) FJIT_ROW_AT(2, a2[0]) FJIT_ROW_AT(3, a2[l1])
    FJIT_ROW_AT(4, a4[0]) FJIT_ROW_AT(5, a4[l1]) FJIT_ROW_AT(6, a6[0]) FJIT_ROW_AT(7, a6[l1])
    ++a0, ++a2, ++a4, ++a6;
    b += ldb;
  }
  FJIT_STORE(0) FJIT_STORE(1) FJIT_STORE(2) FJIT_STORE(3) FJIT_STORE(4) FJIT_STORE(5)
  FJIT_STORE(6) FJIT_STORE(7)
}

#undef FJIT_ZERO
#undef FJIT_ROW
#undef FJIT_ROW_AT
#undef FJIT_STORE
#undef FJIT_AVX512

}  // namespace

const UKernel& ukernel_avx512() {
  static const UKernel k{"avx512 12x32", kMr, kNr, 256, 8, tile_12x32, tile_12x32_rows};
  return k;
}

const UKernel& ukernel_avx512_8() {
  static const UKernel k{"avx512 8x32", kMr8, kNr, 256, 12, tile_8x32, tile_8x32_rows};
  return k;
}

}  // namespace fjit::gemm
