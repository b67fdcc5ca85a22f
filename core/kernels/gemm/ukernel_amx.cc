// The AMX kernels of bf16_gemm.h (ukernel.h): 32 x 32 f32 blocks as four 16 x 16 accumulator
// tiles, fed per 16 depth pairs by two A tiles (16 rows x 16 pairs) and two B tiles (16 pairs x
// 16 columns x 2 bf16, read in place from the packed slivers, whose rows are 32 columns long),
// and the transposing A packer. Intrinsics only: no templates, no inline library functions
// (ukernel.h says why).
#include <immintrin.h>

#include <cstdint>

#include "core/kernels/gemm/ukernel.h"

namespace fjit::gemm {
namespace {

#define FJIT_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq")))

// LDTILECFG's 64-byte operand: palette 1, then per tile its bytes per row and its rows.
struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// 16 x 16 32-bit transpose: r[i] lane q becomes r[q] lane i. The maskz forms with every lane
// set: GCC 12 warns on the plain forms' undefined pass-through operand.
FJIT_AMX void transpose16(__m512i* r) {
  const __mmask16 all = 0xFFFF;
  const __mmask8 all8 = 0xFF;
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(all, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(all, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_maskz_unpacklo_epi64(all8, t[i], t[i + 2]);
    r[i + 1] = _mm512_maskz_unpackhi_epi64(all8, t[i], t[i + 2]);
    r[i + 2] = _mm512_maskz_unpacklo_epi64(all8, t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_maskz_unpackhi_epi64(all8, t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8) {
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_maskz_shuffle_i32x4(all, r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_maskz_shuffle_i32x4(all, r[i + j], r[i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_maskz_shuffle_i32x4(all, t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_maskz_shuffle_i32x4(all, t[j], t[j + 8], 0xdd);
  }
}

}  // namespace

// A constant in memory: GCC 12 does not see LDTILECFG read its operand, and drops stores into a
// configuration built on the stack.
alignas(64) const TileConfig kConfig = {1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

FJIT_AMX void amx_begin() { _tile_loadconfig(&kConfig); }

FJIT_AMX void amx_end() { _tile_release(); }

// Tiles 0-3: C (rows 0-15 x cols 0-15, 0-15 x 16-31, 16-31 x 0-15, 16-31 x 16-31);
// 4, 5: A rows 0-15, 16-31; 6, 7: B cols 0-15, 16-31.
FJIT_AMX void amx_block_32x32(int64_t q_begin, int64_t q_end, int64_t pairs16, int64_t block_pairs,
                              const uint16_t* a, int64_t lda, const uint16_t* bp, int64_t ns, int64_t j,
                              const float* init, float* out, int64_t ldo) {
  if (init != nullptr) {
    _tile_loadd(0, init, 128);
    _tile_loadd(1, init + 16, 128);
    _tile_loadd(2, init + 16 * 32, 128);
    _tile_loadd(3, init + 16 * 32 + 16, 128);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t a_bytes = lda * 2;
  const uint16_t* a_hi = a + 16 * lda;
  for (int64_t q0 = q_begin; q0 < q_end; q0 += block_pairs) {
    const int64_t np = pairs16 - q0 < block_pairs ? pairs16 - q0 : block_pairs;
    const int64_t stop = q_end - q0 < np ? q_end - q0 : np;
    const uint16_t* bs = bp + q0 * ns * 64 + j * np * 64;
    for (int64_t q = 0; q < stop; q += 16) {
      const uint16_t* b = bs + q * 64;
      _tile_loadd(4, a + 2 * (q0 + q), a_bytes);
      _tile_loadd(6, b, 128);
      _tile_loadd(7, b + 32, 128);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, a_hi + 2 * (q0 + q), a_bytes);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  const int64_t o_bytes = ldo * 4;
  _tile_stored(0, out, o_bytes);
  _tile_stored(1, out + 16, o_bytes);
  _tile_stored(2, out + 16 * ldo, o_bytes);
  _tile_stored(3, out + 16 * ldo + 16, o_bytes);
}

// Per 16 pairs (32 rows of the storage) and half of the 32 rows: the pairs of storage rows
// 2q, 2q + 1 interleaved into 32-bit lanes ([q][i]), then transposed to [i][q].
FJIT_AMX void amx_pack_a_trans(int64_t rows, int64_t k, int64_t pairs16, const uint16_t* a, int64_t lda,
                               uint16_t* ap, int64_t ldp) {
  for (int h = 0; h < 2; ++h) {
    const int64_t valid = rows - 16 * h;
    if (valid <= 0) {
      for (int64_t i = 0; i < 16; ++i)
        for (int64_t p = 0; p < 2 * pairs16; p += 32)
          _mm512_storeu_si512(ap + (16 * h + i) * ldp + p, _mm512_setzero_si512());
      continue;
    }
    const __mmask16 mask = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
    const uint16_t* col = a + 16 * h;
    for (int64_t q0 = 0; q0 < pairs16; q0 += 16) {
      __m512i r[16];
      for (int q = 0; q < 16; ++q) {
        const int64_t p = 2 * (q0 + q);
        const __m512i lo = p < k ? _mm512_maskz_cvtepu16_epi32(mask, _mm256_maskz_loadu_epi16(mask, col + p * lda))
                                 : _mm512_setzero_si512();
        const __m512i hi =
            p + 1 < k ? _mm512_maskz_cvtepu16_epi32(mask, _mm256_maskz_loadu_epi16(mask, col + (p + 1) * lda))
                      : _mm512_setzero_si512();
        r[q] = _mm512_or_si512(lo, _mm512_maskz_slli_epi32(mask, hi, 16));
      }
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(ap + (16 * h + i) * ldp + 2 * q0, r[i]);
    }
  }
}

#undef FJIT_AMX

}  // namespace fjit::gemm
