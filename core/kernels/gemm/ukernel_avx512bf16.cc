// The AVX512_BF16 micro-kernel of bf16_gemm.h: a 12 x 32 f32 tile from packed bf16 panels,
// one _mm512_dpbf16_ps per row and vector for each pair of depths. Intrinsics only: no
// templates, no inline library functions (ukernel.h says why).
#include <immintrin.h>

#include <cstdint>

#include "core/kernels/gemm/tile_macros.h"
#include "core/kernels/gemm/ukernel.h"

namespace fjit::gemm {
namespace {

#define FJIT_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

// Row r's pair: both accumulators += the pair (broadcast) . (b0, b1), per column.
#define FJIT_ROW(r)                                                                    \
  x = (__m512bh)_mm512_set1_epi32(_mm_cvtsi128_si32(_mm_loadu_si32(a + (r) * a_row))); \
  c##r##_0 = _mm512_dpbf16_ps(c##r##_0, x, b0);                                        \
  c##r##_1 = _mm512_dpbf16_ps(c##r##_1, x, b1);

// a: row i's bf16 pair q at a + i * a_row + q * a_pair; b: per pair q, 32 columns x 2 bf16.
FJIT_BF16 void tile_bf16_12x32(int64_t pairs, const uint16_t* a, int64_t a_row, int64_t a_pair,
                               const uint16_t* b, float* c, int64_t ldc, bool add) {
  FJIT_ZERO(0) FJIT_ZERO(1) FJIT_ZERO(2) FJIT_ZERO(3) FJIT_ZERO(4) FJIT_ZERO(5)
  FJIT_ZERO(6) FJIT_ZERO(7) FJIT_ZERO(8) FJIT_ZERO(9) FJIT_ZERO(10) FJIT_ZERO(11)
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 32);
    __m512bh x;
    FJIT_ROW(0) FJIT_ROW(1) FJIT_ROW(2) FJIT_ROW(3) FJIT_ROW(4) FJIT_ROW(5)
    FJIT_ROW(6) FJIT_ROW(7) FJIT_ROW(8) FJIT_ROW(9) FJIT_ROW(10) FJIT_ROW(11)
    a += a_pair;
    b += 64;
  }
  FJIT_STORE(0) FJIT_STORE(1) FJIT_STORE(2) FJIT_STORE(3) FJIT_STORE(4) FJIT_STORE(5)
  FJIT_STORE(6) FJIT_STORE(7) FJIT_STORE(8) FJIT_STORE(9) FJIT_STORE(10) FJIT_STORE(11)
}

#undef FJIT_STORE
#undef FJIT_ROW
#undef FJIT_ZERO

// Pairs of A's stored rows interleaved 16 columns at a time, loads masked to the columns left
// (nothing past `width` is read), then cut into 12-row slivers in registers: three vectors
// hold four slivers (valignd). Each sliver's pair is written as a whole vector whose last four
// lanes spill into the next pair's place, which the next pair overwrites (or into the
// sliver's padding, ukernel.h).
FJIT_BF16 void pack_a_trans_slivers(int64_t pairs, int64_t depth, const uint16_t* a, int64_t lda,
                                    int64_t width, uint32_t* ap) {
  const __mmask16 all = 0xFFFF;
  const int64_t slivers = (width + 11) / 12, stride = bf16_sliver_stride(pairs);
  auto columns = [&](const uint16_t* r0, bool second, int64_t i) FJIT_BF16 {
    const int64_t left = width - i;
    const __mmask16 live = left >= 16 ? all : left > 0 ? __mmask16((1u << left) - 1) : __mmask16(0);
    // maskz forms throughout: GCC 12 warns on the plain forms' undefined pass-through operand.
    const __m512i lo = _mm512_maskz_cvtepu16_epi32(all, _mm256_maskz_loadu_epi16(live, r0 + i));
    const __m512i hi =
        second ? _mm512_maskz_cvtepu16_epi32(all, _mm256_maskz_loadu_epi16(live, r0 + lda + i))
               : _mm512_setzero_si512();
    return _mm512_or_si512(lo, _mm512_maskz_slli_epi32(all, hi, 16));
  };
  for (int64_t q = 0; q < pairs; ++q) {
    const uint16_t* r0 = a + 2 * q * lda;
    const bool second = 2 * q + 1 < depth;
    for (int64_t s = 0; s < slivers; s += 4) {
      uint32_t* d = ap + s * stride + q * 12;
      const __m512i v0 = columns(r0, second, 12 * s), v1 = columns(r0, second, 12 * s + 16),
                    v2 = columns(r0, second, 12 * s + 32);
      _mm512_storeu_si512(d, v0);
      if (s + 1 < slivers)
        _mm512_storeu_si512(d + stride, _mm512_maskz_alignr_epi32(all, v1, v0, 12));
      if (s + 2 < slivers)
        _mm512_storeu_si512(d + 2 * stride, _mm512_maskz_alignr_epi32(all, v2, v1, 8));
      if (s + 3 < slivers)
        _mm512_storeu_si512(d + 3 * stride, _mm512_maskz_alignr_epi32(all, v2, v2, 4));
    }
  }
}

#undef FJIT_BF16

}  // namespace

Bf16TileFn bf16_tile_avx512() { return tile_bf16_12x32; }
Bf16PackATFn bf16_pack_a_trans_avx512() { return pack_a_trans_slivers; }

}  // namespace fjit::gemm
