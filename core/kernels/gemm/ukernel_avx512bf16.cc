// The AVX512_BF16 micro-kernel of bf16_gemm.h: a 12 x 32 f32 tile from packed bf16 panels,
// one _mm512_dpbf16_ps per row and vector for each pair of depths. Intrinsics only: no
// templates, no inline library functions (ukernel.h says why).
#include <immintrin.h>

#include <cstdint>

#include "core/kernels/gemm/ukernel.h"

namespace fjit::gemm {
namespace {

#define FJIT_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

// a: row i's bf16 pair q at a + i * a_row + q * a_pair; b: per pair q, 32 columns x 2 bf16.
FJIT_BF16 void tile_bf16_12x32(int64_t pairs, const uint16_t* a, int64_t a_row, int64_t a_pair,
                               const uint16_t* b, float* c, int64_t ldc, bool add) {
  __m512 acc[12][2];
  for (int i = 0; i < 12; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 32);
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(_mm_cvtsi128_si32(_mm_loadu_si32(a + i * a_row)));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, b1);
    }
    a += a_pair;
    b += 64;
  }
  for (int i = 0; i < 12; ++i) {
    float* row = c + i * ldc;
    __m512 lo = acc[i][0], hi = acc[i][1];
    if (add) {
      lo = _mm512_add_ps(_mm512_loadu_ps(row), lo);
      hi = _mm512_add_ps(_mm512_loadu_ps(row + 16), hi);
    }
    _mm512_storeu_ps(row, lo);
    _mm512_storeu_ps(row + 16, hi);
  }
}

// Two rows of 12 bf16 from A's storage widened to 32 bits and interleaved: masked loads and
// stores, so nothing past the 12 columns is read or written.
FJIT_BF16 void pack_a_trans_12(int64_t pairs, const uint16_t* a, int64_t lda, uint32_t* ap) {
  const __mmask16 m12 = 0x0FFF;
  for (int64_t q = 0; q < pairs; ++q) {
    const uint16_t* r0 = a + 2 * q * lda;
    // maskz forms: GCC 12 warns on the plain forms' undefined pass-through operand.
    const __m512i lo = _mm512_maskz_cvtepu16_epi32(m12, _mm256_maskz_loadu_epi16(m12, r0));
    const __m512i hi = _mm512_maskz_cvtepu16_epi32(m12, _mm256_maskz_loadu_epi16(m12, r0 + lda));
    _mm512_mask_storeu_epi32(ap + q * 12, m12, _mm512_or_si512(lo, _mm512_maskz_slli_epi32(m12, hi, 16)));
  }
}

#undef FJIT_BF16

}  // namespace

Bf16TileFn bf16_tile_avx512() { return tile_bf16_12x32; }
Bf16PackATFn bf16_pack_a_trans_avx512() { return pack_a_trans_12; }

}  // namespace fjit::gemm
