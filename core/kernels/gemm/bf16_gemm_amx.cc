// The AMX path of bf16_gemm.h: 32 x 32 blocks of C, each the sum over the whole depth of tile
// products (gemm::amx_block_32x32, ukernel.h), in one f32 accumulator chain per element.
//
// op(A)'s rows per block of 32 are read in place (row-major, a whole block, a depth that fills
// whole tiles) or packed zero-padded, all blocks first. op(B) comes packed whole (bf16_pack_b),
// or (bf16_gemm_amx_streamed) is packed one depth panel at a time into a buffer that stays in
// L2, which spares writing and reading back a packed copy of a large op(B) in memory; the
// panels start on whole tiles, so either way each element meets the same tile products. A
// product no deeper than kDepthPanel
// pairs runs per block of rows, every sliver of op(B) over the whole depth (the block's A stays
// in L1). A deeper one runs in depth panels of kDepthPanel pairs, every block and sliver per
// panel, so that a panel's A block stays in L1 and its op(B) in L2; between panels each block's
// accumulators go to memory and come back exactly (an f32 store and load), so every element's
// chain, and its bits, are those of one pass over the depth.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernels/gemm/bf16_gemm.h"
#include "core/kernels/gemm/bf16_layout.h"
#include "core/kernels/gemm/ukernel.h"

namespace fjit {

namespace {

constexpr int64_t kBlock = 32, kDepthPanel = 2 * kPairs;

// Where a depth panel's op(B) is packed: pairs [q_begin, q_begin + the panel's pairs) of a
// packing of pairs16 pairs and ns slivers (bf16_layout.h), in which C's sliver j is sliver
// j - j_offset.
struct PanelB {
  const uint16_t* bp;
  int64_t pairs16, ns, q_begin, j_offset;
};

// C's slivers [j0, j1) = (accumulate ? C : 0) + op(A) op(B), depth panel by depth panel, each
// panel's op(B) where panel_b(q0, q1) says (called once per panel, before its blocks).
template <class PanelFn>
void amx_panels(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a, float* c,
                bool accumulate, int64_t j0, int64_t j1, PanelFn&& panel_b) {
  const int64_t pairs16 = round16((k + 1) / 2), width = 2 * pairs16;
  const int64_t blocks = (m + kBlock - 1) / kBlock;
  const bool in_place = !trans_a && k == width;
  // The blocks of op(A) that are packed: all of them, or (in place) a last partial one.
  const int64_t first_packed = in_place ? m / kBlock : 0;
  thread_local std::vector<uint16_t> ap_buf;
  grow_scratch(ap_buf, (blocks - first_packed) * kBlock * width);
  for (int64_t b = first_packed; b < blocks; ++b) {
    const int64_t row0 = b * kBlock, rows = std::min(kBlock, m - row0);
    uint16_t* ap = ap_buf.data() + (b - first_packed) * kBlock * width;
    if (trans_a) {
      gemm::amx_pack_a_trans(rows, k, pairs16, a + row0, lda, ap, width);
      continue;
    }
    std::fill(ap, ap + kBlock * width, uint16_t{0});
    for (int64_t r = 0; r < rows; ++r) std::copy(a + (row0 + r) * lda, a + (row0 + r) * lda + k, ap + r * width);
  }
  auto rows_of = [&](int64_t b) {
    return b < first_packed ? a + b * kBlock * lda : ap_buf.data() + (b - first_packed) * kBlock * width;
  };
  auto stride_of = [&](int64_t b) { return b < first_packed ? lda : width; };
  // Accumulators kept between depth panels, per block and sliver (32 x 32, row stride 32).
  thread_local std::vector<float> part_buf;
  const bool panels = pairs16 > kDepthPanel;
  if (panels) grow_scratch(part_buf, blocks * (j1 - j0) * kBlock * kBlock);
  alignas(64) float tmp[kBlock * kBlock];
  for (int64_t q0 = 0; q0 < pairs16; q0 += kDepthPanel) {
    const int64_t q1 = std::min(q0 + kDepthPanel, pairs16);
    const bool last = q1 == pairs16;
    const PanelB pb = panel_b(q0, q1);
    const int64_t qb = pb.q_begin, qe = pb.q_begin + (q1 - q0);
    gemm::amx_begin();
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t row0 = b * kBlock, rows = std::min(kBlock, m - row0);
      // A shifted so that the packing's pair qb is the panel's pair q0.
      const uint16_t* ar = rows_of(b) + 2 * (q0 - qb);
      const int64_t ld = stride_of(b);
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t col0 = j * kNr, cols = std::min(kNr, n - col0), jp = j - pb.j_offset;
        float* part = panels ? part_buf.data() + (b * (j1 - j0) + j - j0) * kBlock * kBlock : nullptr;
        const float* init = q0 == 0 ? nullptr : part;
        float* cb = c + row0 * n + col0;
        if (!last) {
          gemm::amx_block_32x32(qb, qe, pb.pairs16, kPairs, ar, ld, pb.bp, pb.ns, jp, init, part, kBlock);
          continue;
        }
        if (!accumulate && rows == kBlock && cols == kNr) {
          gemm::amx_block_32x32(qb, qe, pb.pairs16, kPairs, ar, ld, pb.bp, pb.ns, jp, init, cb, n);
          continue;
        }
        gemm::amx_block_32x32(qb, qe, pb.pairs16, kPairs, ar, ld, pb.bp, pb.ns, jp, init, tmp, kBlock);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t col = 0; col < cols; ++col)
            cb[r * n + col] = accumulate ? cb[r * n + col] + tmp[r * kBlock + col] : tmp[r * kBlock + col];
      }
    }
    gemm::amx_end();
  }
}

}  // namespace

void amx_gemm_on_packed(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
                        const uint16_t* bp, float* c, bool accumulate, int64_t j0, int64_t j1) {
  const int64_t pairs16 = round16((k + 1) / 2), ns = (n + kNr - 1) / kNr;
  amx_panels(m, n, k, a, lda, trans_a, c, accumulate, j0, j1,
             [&](int64_t q0, int64_t) { return PanelB{bp, pairs16, ns, q0, 0}; });
}

bool bf16_amx_streams(int64_t k) { return round16((k + 1) / 2) > kDepthPanel; }

void bf16_gemm_amx_streamed(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, bool trans_a,
                            const uint16_t* b, int64_t ldb, bool trans_b, float* c, int64_t col_begin,
                            int64_t col_end) {
  col_end = std::min(col_end, n);
  if (m <= 0 || col_end <= col_begin || k <= 0) {
    if (k <= 0)
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * n + col_begin, c + r * n + col_end, 0.f);
    return;
  }
  const int64_t j0 = col_begin / kNr, j1 = (col_end + kNr - 1) / kNr;
  const int64_t n_sub = std::min(n, j1 * kNr) - j0 * kNr;
  thread_local std::vector<uint16_t> panel_buf;
  uint16_t* pp = aligned_scratch(panel_buf, bf16_packed_b_size(n_sub, 2 * kDepthPanel));
  // Each panel: op(B)'s rows 2 q0 .. 2 q1 and C's columns, packed as a product of their own (the
  // same tiles and pairs as in the whole packing: panels start on whole 16-pair tiles).
  amx_panels(m, n, k, a, lda, trans_a, c, false, j0, j1, [&](int64_t q0, int64_t q1) {
    const int64_t k_sub = std::min(k, 2 * q1) - 2 * q0;
    const uint16_t* bs = trans_b ? b + j0 * kNr * ldb + 2 * q0 : b + 2 * q0 * ldb + j0 * kNr;
    bf16_pack_b(n_sub, k_sub, bs, ldb, trans_b, pp);
    return PanelB{pp, round16((k_sub + 1) / 2), (n_sub + kNr - 1) / kNr, 0, j0};
  });
}

}  // namespace fjit
