// The AVX2 + FMA f32 micro-kernel (ukernel.h): a 6 x 16 tile in 12 ymm accumulators, two
// vectors of B and one broadcast of A per step. Intrinsics only: no templates, no inline
// library functions (ukernel.h says why).
#include <immintrin.h>

#include "core/kernels/gemm/ukernel.h"

namespace fjit::gemm {
namespace {

constexpr int kMr = 6, kNr = 16;

#define FJIT_AVX2 __attribute__((target("avx2,fma")))

// C's tile = (add ? C's tile : 0) + the accumulators.
FJIT_AVX2 inline void store_6x16(float* c, int64_t ldc, bool add, __m256 c00, __m256 c01, __m256 c10,
                                 __m256 c11, __m256 c20, __m256 c21, __m256 c30, __m256 c31,
                                 __m256 c40, __m256 c41, __m256 c50, __m256 c51) {
  const __m256 acc[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < kMr; ++i) {
    float* row = c + i * ldc;
    __m256 lo = acc[i][0], hi = acc[i][1];
    if (add) {
      lo = _mm256_add_ps(_mm256_loadu_ps(row), lo);
      hi = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi);
    }
    _mm256_storeu_ps(row, lo);
    _mm256_storeu_ps(row + 8, hi);
  }
}

FJIT_AVX2 void tile_6x16(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                         int64_t ldc, bool add) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
         c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
         c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
         c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
    a += kMr;
    b += ldb;
  }
  store_6x16(c, ldc, add, c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51);
}

// A read in place: rows 3q .. 3q + 2 at aq[0], aq[lda], aq[2 * lda].
FJIT_AVX2 void tile_6x16_rows(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                              float* c, int64_t ldc, bool add) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
         c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
         c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
         c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  const float *a0 = a, *a3 = a + 3 * lda;
  const int64_t l1 = lda, l2 = 2 * lda;
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a0);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a0 + l1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a0 + l2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a3 + l1);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a3 + l2);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
    ++a0, ++a3;
    b += ldb;
  }
  store_6x16(c, ldc, add, c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51);
}

#undef FJIT_AVX2

}  // namespace

const UKernel& ukernel_avx2() {
  static const UKernel k{"avx2 6x16", kMr, kNr, 256, 16, tile_6x16, tile_6x16_rows};
  return k;
}

}  // namespace fjit::gemm
