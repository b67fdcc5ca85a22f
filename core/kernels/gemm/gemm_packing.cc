// The packed GEMM's panel packing (gemm_packing.h): 8 x 8 and 4 x 8 AVX transposes for the
// panels taken across a row-major source, row copies (masked below 17 floats) for the others.
#include "core/kernels/gemm/gemm_packing.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace fjit::gemm {
namespace {

// The 8 x 8 block src[r * lds + p] (r, p < 8) into dst[p * ldd + r].
inline void transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r0 = _mm256_loadu_ps(src + 0 * lds), r1 = _mm256_loadu_ps(src + 1 * lds);
  __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
  __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
  __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r0 = _mm256_permute2f128_ps(s0, s4, 0x20);
  r1 = _mm256_permute2f128_ps(s1, s5, 0x20);
  r2 = _mm256_permute2f128_ps(s2, s6, 0x20);
  r3 = _mm256_permute2f128_ps(s3, s7, 0x20);
  r4 = _mm256_permute2f128_ps(s0, s4, 0x31);
  r5 = _mm256_permute2f128_ps(s1, s5, 0x31);
  r6 = _mm256_permute2f128_ps(s2, s6, 0x31);
  r7 = _mm256_permute2f128_ps(s3, s7, 0x31);
  _mm256_storeu_ps(dst + 0 * ldd, r0);
  _mm256_storeu_ps(dst + 1 * ldd, r1);
  _mm256_storeu_ps(dst + 2 * ldd, r2);
  _mm256_storeu_ps(dst + 3 * ldd, r3);
  _mm256_storeu_ps(dst + 4 * ldd, r4);
  _mm256_storeu_ps(dst + 5 * ldd, r5);
  _mm256_storeu_ps(dst + 6 * ldd, r6);
  _mm256_storeu_ps(dst + 7 * ldd, r7);
}

// The 4 x 8 block src[r * lds + p] (r < 4, p < 8) into dst[p * ldd + r].
inline void transpose4x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  const __m256 r0 = _mm256_loadu_ps(src + 0 * lds), r1 = _mm256_loadu_ps(src + 1 * lds);
  const __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  _mm_storeu_ps(dst + 0 * ldd, _mm256_castps256_ps128(s0));
  _mm_storeu_ps(dst + 1 * ldd, _mm256_castps256_ps128(s1));
  _mm_storeu_ps(dst + 2 * ldd, _mm256_castps256_ps128(s2));
  _mm_storeu_ps(dst + 3 * ldd, _mm256_castps256_ps128(s3));
  _mm_storeu_ps(dst + 4 * ldd, _mm256_extractf128_ps(s0, 1));
  _mm_storeu_ps(dst + 5 * ldd, _mm256_extractf128_ps(s1, 1));
  _mm_storeu_ps(dst + 6 * ldd, _mm256_extractf128_ps(s2, 1));
  _mm_storeu_ps(dst + 7 * ldd, _mm256_extractf128_ps(s3, 1));
}

// dst[p * W + j] = src[p * lds + j] for j < W, p < kc: whole rows, at the width of the kernels
// (B slivers of 16 or 32, A panels of 12, 8 or 6), in plain moves: masked stores
// (vmaskmovps) are slow on AMD's Zen 4 (bench/RESULTS.md, issue 29 on the Zen 4).
template <int W>
void copy_rows(const float* src, int64_t lds, int64_t kc, float* dst) {
  static_assert(W % 2 == 0, "rows of an even width");
  for (int64_t p = 0; p < kc; ++p) {
    const float* s = src + p * lds;
    float* d = dst + p * W;
#pragma GCC unroll 4
    for (int j = 0; j + 8 <= W; j += 8) _mm256_storeu_ps(d + j, _mm256_loadu_ps(s + j));
    constexpr int j4 = W / 8 * 8, j2 = W / 4 * 4;
    if constexpr (W % 8 >= 4) _mm_storeu_ps(d + j4, _mm_loadu_ps(s + j4));
    if constexpr (W % 4 == 2) std::memcpy(d + j2, s + j2, 2 * sizeof(float));
  }
}

}  // namespace

// A panel whose packed rows run along the source's rows: dst[p * w + r] = src[r * lds + p]
// for r < rows (zero for rows <= r < w), p < kc.
void pack_across(const float* src, int64_t lds, int64_t rows, int64_t kc, float* dst, int64_t w) {
  int64_t r = 0;
  const int64_t kc8 = kc / 8 * 8;
  for (; r + 8 <= rows; r += 8)
    for (int64_t p = 0; p < kc8; p += 8) transpose8x8(src + r * lds + p, lds, dst + p * w + r, w);
  for (; r + 4 <= rows; r += 4)
    for (int64_t p = 0; p < kc8; p += 8) transpose4x8(src + r * lds + p, lds, dst + p * w + r, w);
  // What the blocks left: the last kc % 8 depths of their rows, then the other rows.
  for (int64_t p = kc8; p < kc; ++p)
    for (int64_t q = 0; q < r; ++q) dst[p * w + q] = src[q * lds + p];
  for (int64_t p = 0; p < kc; ++p) {
    float* d = dst + p * w;
    for (int64_t q = r; q < rows; ++q) d[q] = src[q * lds + p];
    for (int64_t q = std::max(r, rows); q < w; ++q) d[q] = 0.f;
  }
}

// A panel whose packed rows are the source's rows: dst[p * w + j] = src[p * lds + j] for
// j < cols (zero for cols <= j < w), p < kc.
void pack_along(const float* src, int64_t lds, int64_t cols, int64_t kc, float* dst, int64_t w) {
  if (cols == w) {
    switch (w) {
      case 32: return copy_rows<32>(src, lds, kc, dst);
      case 16: return copy_rows<16>(src, lds, kc, dst);
      case 12: return copy_rows<12>(src, lds, kc, dst);
      case 8: return copy_rows<8>(src, lds, kc, dst);
      case 6: return copy_rows<6>(src, lds, kc, dst);
      default: break;
    }
  }
  if (w <= 16) {  // an A panel (MR wide) or a narrow one: masked moves, no library call per row
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    auto below = [&](int64_t x) {
      return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(x)), lane);
    };
    const __m256i load0 = below(std::min<int64_t>(cols, 8)),
                  store0 = below(std::min<int64_t>(w, 8));
    const __m256i load1 = below(cols - 8), store1 = below(w - 8);
    // The masked loads give the zeros past cols; where w is 8, 12 or 16 the stores are plain.
    if (w == 8 || w == 12 || w == 16) {
      for (int64_t p = 0; p < kc; ++p) {
        const float* s = src + p * lds;
        float* d = dst + p * w;
        _mm256_storeu_ps(d, _mm256_maskload_ps(s, load0));
        if (w == 12) _mm_storeu_ps(d + 8, _mm256_castps256_ps128(_mm256_maskload_ps(s + 8, load1)));
        if (w == 16) _mm256_storeu_ps(d + 8, _mm256_maskload_ps(s + 8, load1));
      }
      return;
    }
    for (int64_t p = 0; p < kc; ++p) {
      const float* s = src + p * lds;
      float* d = dst + p * w;
      _mm256_maskstore_ps(d, store0, _mm256_maskload_ps(s, load0));
      if (w > 8) _mm256_maskstore_ps(d + 8, store1, _mm256_maskload_ps(s + 8, load1));
    }
    return;
  }
  for (int64_t p = 0; p < kc; ++p) {
    float* d = dst + p * w;
    std::memcpy(d, src + p * lds, cols * sizeof(float));
    std::fill(d + cols, d + w, 0.f);
  }
}

}  // namespace fjit::gemm
