// The AVX512_BF16 variant of cast_bf16.h's rounding. Intrinsics under a target attribute, so
// the rest of the build stays at its baseline ISA; chosen at compile time of a plan only when
// active_avx512_bf16() (core/base/isa.h).
#include <immintrin.h>

#include "core/kernels/elementwise/cast_bf16.h"

namespace fjit::kernels::ew {

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_f32_to_bf16_avx512(
    const uint32_t* x, uint16_t* o, int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i min_normal = _mm512_set1_epi32(0x00800000);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    const __m512i a = _mm512_and_si512(u, abs_mask);
    // Lanes where the instruction's answer differs from the rule: denormals (0 < a < 2^-126)
    // and NaNs (a > inf). Zero and infinity convert exactly.
    const __mmask16 special = _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(a, a), a, min_normal) |
                              _mm512_cmpgt_epu32_mask(a, inf);
    if (special) [[unlikely]] {
      round_f32_to_bf16_portable(x + i, o + i, 16);
      continue;
    }
    const __m256bh r = _mm512_cvtneps_pbh(_mm512_castsi512_ps(u));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), (__m256i)r);
  }
  round_f32_to_bf16_portable(x + i, o + i, n - i);
}

}  // namespace fjit::kernels::ew
