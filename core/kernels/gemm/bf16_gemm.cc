// bf16_gemm.h's packing of op(B) (bf16_layout.h), its AVX512_BF16 driver and the choice of
// path. AVX512_BF16: A read in place or packed per sliver of 12 rows as 32-bit pairs, edge
// tiles through a temporary tile, as the packed f32 GEMM does. AMX: bf16_gemm_amx.cc.
#include "core/kernels/gemm/bf16_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/base/isa.h"
#include "core/kernels/gemm/bf16_layout.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/kernels/gemm/ukernel.h"

namespace fjit {
namespace {

constexpr int64_t kMr = 12;
// op(A)'s rows (whole 12-row slivers) whose transposed A is packed at once.
constexpr int64_t kGroupRows = 96;

float widen(uint16_t x) {
  const uint32_t bits = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// op(A) [m, k]: A row-major with row stride lda, or with trans_a A^T for A stored [k, m] with
// row stride lda; bp: op(B) packed by bf16_pack_b. Each depth block runs over all the rows, in
// groups of kGroupRows (whole slivers). From a row-major A, a sliver is read in place where it
// has 12 rows and whole pairs, else its rows are copied, zero-padded, into a buffer; from a
// transposed A, a group's A is interleaved in one pass along its stored rows.
void bf16_gemm_on_packed(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                         bool trans_a, const uint16_t* bp, float* c, bool accumulate, int64_t j0, int64_t j1) {
  const gemm::Bf16TileFn tile = gemm::bf16_tile_avx512();
  const int64_t pairs = (k + 1) / 2, ns = (n + kNr - 1) / kNr;
  thread_local std::vector<uint32_t> ap_buf;
  uint32_t* ap = aligned_scratch(ap_buf, kGroupRows / kMr * gemm::bf16_sliver_stride(kPairs));
  alignas(64) float tmp[kMr * kNr];
  // Rows row0.. (12 or fewer) against depth block q0's pairs, for C's slivers [j0, j1): op(A)
  // from `packed` (12 pairs a step) where given, else from the row-major A.
  auto sliver = [&](int64_t row0, int64_t q0, const uint16_t* packed) {
    const int64_t np = std::min(kPairs, pairs - q0), depth = std::min(2 * np, k - 2 * q0);
    const int64_t rows = std::min(kMr, m - row0);
    const bool add = accumulate || q0 > 0;
    const uint16_t* as = packed;
    int64_t a_row = 2, a_pair = 2 * kMr;
    if (!packed && rows == kMr && depth == 2 * np) {  // in place
      as = a + row0 * lda + 2 * q0;
      a_row = lda;
      a_pair = 2;
    } else if (!packed) {  // row i's pairs at ap[i * np ...], zero past the depth and rows
      auto* row_buf = reinterpret_cast<uint16_t*>(ap);
      for (int64_t i = 0; i < kMr; ++i) {
        uint16_t* d = row_buf + i * 2 * np;
        const int64_t have = i < rows ? depth : 0;
        if (have > 0) std::memcpy(d, a + (row0 + i) * lda + 2 * q0, have * sizeof(uint16_t));
        std::fill(d + have, d + 2 * np, uint16_t{0});
      }
      as = row_buf;
      a_row = 2 * np;
      a_pair = 2;
    }
    const uint16_t* bq = bp + q0 * ns * kNr * 2;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t col0 = j * kNr, cols = std::min(kNr, n - col0);
      const uint16_t* bs = bq + j * round16(np) * kNr * 2;
      float* ct = c + row0 * n + col0;
      if (rows == kMr && cols == kNr) {
        tile(np, as, a_row, a_pair, bs, ct, n, add);
        continue;
      }
      tile(np, as, a_row, a_pair, bs, tmp, kNr, false);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t col = 0; col < cols; ++col)
          ct[r * n + col] = add ? ct[r * n + col] + tmp[r * kNr + col] : tmp[r * kNr + col];
    }
  };
  const gemm::Bf16PackATFn pack_at = gemm::bf16_pack_a_trans_avx512();
  const auto* ap16 = reinterpret_cast<const uint16_t*>(ap);
  for (int64_t q0 = 0; q0 < pairs; q0 += kPairs) {
    const int64_t np = std::min(kPairs, pairs - q0), depth = std::min(2 * np, k - 2 * q0);
    for (int64_t g0 = 0; g0 < m; g0 += kGroupRows) {
      const int64_t g_rows = std::min(kGroupRows, m - g0);
      if (trans_a) pack_at(np, depth, a + 2 * q0 * lda + g0, lda, g_rows, ap);
      for (int64_t row0 = g0; row0 < g0 + g_rows; row0 += kMr)
        sliver(row0, q0,
               trans_a ? ap16 + 2 * ((row0 - g0) / kMr) * gemm::bf16_sliver_stride(np) : nullptr);
    }
  }
}

void bf16_gemm_native(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
                      const uint16_t* b, float* c, bool accumulate) {
  thread_local std::vector<uint16_t> bp_buf;
  uint16_t* bp = aligned_scratch(bp_buf, bf16_packed_b_size(n, k));
  bf16_pack_b(n, k, b, n, false, bp);
  bf16_gemm_packed_b(m, n, k, a, lda, trans_a, bp, c, accumulate);
}

}  // namespace

int64_t bf16_packed_b_size(int64_t n, int64_t k) {
  return round16((k + 1) / 2) * ((n + kNr - 1) / kNr) * kNr * 2;
}

int64_t bf16_pack_b_blocks(int64_t k) { return ((k + 1) / 2 + kPairs - 1) / kPairs; }

void bf16_pack_b(int64_t n, int64_t k, const uint16_t* b, int64_t ldb, bool trans_b, uint16_t* bp) {
  bf16_pack_b_part(n, k, b, ldb, trans_b, bp, 0, bf16_pack_b_blocks(k));
}

void bf16_pack_b_part(int64_t n, int64_t k, const uint16_t* b, int64_t ldb, bool trans_b, uint16_t* bp,
                      int64_t first, int64_t last) {
  const int64_t pairs = std::min((k + 1) / 2, last * kPairs), ns = (n + kNr - 1) / kNr;
  // op(B)[p, col]: B [k, n] row-major, or B stored [n, k] (read along its rows).
  auto at = [&](int64_t p, int64_t col) -> uint16_t {
    if (p >= k || col >= n) return 0;
    return trans_b ? b[col * ldb + p] : b[p * ldb + col];
  };
  for (int64_t q0 = first * kPairs; q0 < pairs; q0 += kPairs) {
    const int64_t np = std::min(kPairs, pairs - q0);
    const bool whole_pairs = 2 * (q0 + np) <= k;
    for (int64_t j = 0; j < ns; ++j) {
      uint16_t* d = bp + q0 * ns * kNr * 2 + j * round16(np) * kNr * 2;
      std::memset(d + np * kNr * 2, 0, (round16(np) - np) * kNr * 2 * sizeof(uint16_t));
      const bool whole = (j + 1) * kNr <= n && whole_pairs;
      if (whole && !trans_b) {  // two rows of B interleaved
        for (int64_t q = 0; q < np; ++q) {
          const uint16_t* r0 = b + 2 * (q0 + q) * ldb + j * kNr;
          const uint16_t* r1 = r0 + ldb;
          uint16_t* dq = d + q * kNr * 2;
          for (int64_t col = 0; col < kNr; ++col) {
            dq[2 * col] = r0[col];
            dq[2 * col + 1] = r1[col];
          }
        }
      } else if (whole) {  // a pair is two neighbours along a stored row: one 32-bit copy
        for (int64_t col = 0; col < kNr; ++col) {
          const uint16_t* row = b + (j * kNr + col) * ldb + 2 * q0;
          for (int64_t q = 0; q < np; ++q) std::memcpy(d + (q * kNr + col) * 2, row + 2 * q, 4);
        }
      } else {
        for (int64_t q = 0; q < np; ++q)
          for (int64_t col = 0; col < kNr; ++col) {
            const int64_t p = 2 * (q0 + q), cc = j * kNr + col;
            d[(q * kNr + col) * 2] = at(p, cc);
            d[(q * kNr + col) * 2 + 1] = at(p + 1, cc);
          }
      }
    }
  }
}

void bf16_gemm_packed_b(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                        bool trans_a, const uint16_t* bp, float* c, bool accumulate) {
  bf16_gemm_packed_b_columns(m, n, k, a, lda, trans_a, bp, c, accumulate, 0, n);
}

void bf16_gemm_packed_b_columns(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
                                const uint16_t* bp, float* c, bool accumulate, int64_t col_begin, int64_t col_end) {
  col_end = std::min(col_end, n);
  if (m <= 0 || col_end <= col_begin) return;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * n + col_begin, c + r * n + col_end, 0.f);
    return;
  }
  const int64_t j0 = col_begin / kNr, j1 = (col_end + kNr - 1) / kNr;
  if (active_amx_bf16()) amx_gemm_on_packed(m, n, k, a, lda, trans_a, bp, c, accumulate, j0, j1);
  else bf16_gemm_on_packed(m, n, k, a, lda, trans_a, bp, c, accumulate, j0, j1);
}

void bf16_gemm_widened(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b,
                       float* c, bool accumulate) {
  bf16_gemm_widened_ex(m, n, k, a, k, false, b, c, accumulate);
}

void bf16_gemm_widened_ex(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                          bool trans_a, const uint16_t* b, float* c, bool accumulate) {
  // op(A) widened in the layout it is stored in ([m, k] or, transposed, [k, m]), packed.
  const int64_t ra = trans_a ? k : m, ca = trans_a ? m : k;
  std::vector<float> a32(m * k), b32(k * n);
  for (int64_t r = 0; r < ra; ++r)
    for (int64_t col = 0; col < ca; ++col) a32[r * ca + col] = widen(a[r * lda + col]);
  std::transform(b, b + k * n, b32.begin(), widen);
  packed_sgemm(active_isa(), trans_a, false, m, n, k, a32.data(), b32.data(), c, accumulate, 1);
}

void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b, float* c,
               bool accumulate) {
  bf16_gemm_ex(m, n, k, a, k, false, b, c, accumulate);
}

void bf16_gemm_ex(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
                  const uint16_t* b, float* c, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) std::fill(c, c + m * n, 0.f);
    return;
  }
  if (active_avx512_bf16()) bf16_gemm_native(m, n, k, a, lda, trans_a, b, c, accumulate);
  else bf16_gemm_widened_ex(m, n, k, a, lda, trans_a, b, c, accumulate);
}

}  // namespace fjit
