// The matmul op on bf16 operands (see matmul_bf16.h).
#include "core/kernels/gemm/matmul_bf16.h"

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <vector>

#include "core/base/fpe_flags.h"
#include "core/base/isa.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"
#include "core/kernels/gemm/bf16_gemm.h"
#include "core/kernels/gemm/packed_gemm.h"

namespace fjit::kernels::st {
namespace {

// Rows per block: a multiple of bf16_gemm's micro-tile (12 rows; 32 on the AMX tiles), so a
// block boundary never changes how a row is tiled; at least kMinRows, so each block amortises
// packing op(B).
constexpr int64_t kMinRows = 96, kMaxBlocks = 4;
int64_t tile_rows() { return active_amx_bf16() ? 32 : 12; }

// With `threads` threads, the blocks are made a multiple of the thread count where there are
// micro-tiles enough, so that no thread idles while another runs a last block (a product
// of a few hundred rows and a deep K: the weight gradients). Which rows share a block changes
// no bit (below), so the blocks may follow the thread count.
int64_t block_rows(int64_t m, int threads) {
  const int64_t tile = tile_rows();
  const int64_t per = std::max(kMinRows, (m + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t rows = (per + tile - 1) / tile * tile;
  const int64_t tiles = (m + tile - 1) / tile, blocks = (m + rows - 1) / rows;
  if (threads <= 1 || blocks % threads == 0 || blocks >= 2 * threads * kMaxBlocks) return rows;
  const int64_t even = std::min(tiles, (blocks + threads - 1) / threads * threads);
  return (tiles + even - 1) / even * tile;
}

// Under a step deadline: blocks of about kDeadlineFlops (whole micro-tiles), so that the
// deadline is asked at a bounded interval however large the product. A row's arithmetic does
// not depend on its block, so the bits are those of block_rows' blocks.
constexpr int64_t kDeadlineFlops = int64_t{1} << 28;
int64_t deadline_block_rows(int64_t m, int64_t n, int64_t k, int threads) {
  const int64_t tile = tile_rows();
  const int64_t per_row = std::max<int64_t>(1, 2 * n * k);
  const int64_t rows = std::max<int64_t>(tile, kDeadlineFlops / per_row / tile * tile);
  return std::min(block_rows(m, threads), rows);
}

float widen(uint16_t x) {
  const uint32_t bits = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// prepare(0 .. pieces), then work(0 .. items): with threads > 1 on that many threads (a static
// share each, the workers' floating-point flags collected), else on the calling thread.
template <class Prepare, class Work>
void in_two_phases(int threads, int64_t pieces, Prepare&& prepare, int64_t items, Work&& work) {
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < pieces; ++i) prepare(i);
#pragma omp for schedule(static)
      for (int64_t i = 0; i < items; ++i) work(i);
      fpe::collect_worker_flags();
    }
    return;
  }
  for (int64_t i = 0; i < pieces; ++i) prepare(i);
  for (int64_t i = 0; i < items; ++i) work(i);
}

// One native (AMX or AVX512_BF16) batched product: out [batch, m, n] = op(A) op(B) per entry,
// op(A) from A row-major with row stride lda (or with ta, stored [k, m]), op(B) from B
// row-major with row stride ldb (or with tb, stored [n, k]); entries sa and sb apart.
struct Operands {
  const uint16_t* a;
  int64_t sa, lda;
  bool ta;
  const uint16_t* b;
  int64_t sb, ldb;
  bool tb;
  int64_t m, n, k, batch;
};

// Each entry's op(B) packed once, in pieces (its depth blocks) shared by the threads, then
// shared by its row blocks, whose rows of op(A) are read in place. Where there are fewer row
// blocks than threads (a product of few rows: a weight gradient computed transposed), each
// block's columns are split into groups of 32-column slivers too. A row's and a column's
// arithmetic do not depend on their block or group, so neither changes a bit.
void native_products(const Operands& o, float* out, int64_t deadline, int want) {
  const int64_t m = o.m, n = o.n, k = o.k, batch = o.batch;
  // C's 32-column slivers in about `wanted` groups: per_group slivers each, `groups` of them.
  const int64_t slivers = (n + 31) / 32;
  int64_t per_group = slivers, groups = 1;
  auto split_columns = [&](int64_t wanted) {
    per_group = (slivers + wanted - 1) / wanted;
    groups = (slivers + per_group - 1) / per_group;
  };
  // On the AMX tiles a product deeper than one depth panel packs op(B) a panel at a time as it
  // goes (bf16_gemm_amx_streamed), each group of columns on its own thread with all the rows;
  // not under a deadline, which the row blocks below ask between blocks.
  if (active_amx_bf16() && deadline == 0 && bf16_amx_streams(k)) {
    split_columns(std::min<int64_t>(slivers, want));
    const int64_t work = batch * groups;
    auto streamed = [&](int64_t item) {
      const int64_t i = item / groups, g = item % groups;
      bf16_gemm_amx_streamed(m, n, k, o.a + i * o.sa, o.lda, o.ta, o.b + i * o.sb, o.ldb, o.tb, out + i * m * n,
                             g * per_group * 32, (g + 1) * per_group * 32);
    };
    in_two_phases(static_cast<int>(std::min<int64_t>(work, want)), 0, [](int64_t) {}, work, streamed);
    return;
  }
  const int64_t rows = deadline != 0 ? deadline_block_rows(m, n, k, want) : block_rows(m, want);
  const int64_t blocks = (m + rows - 1) / rows, row_items = batch * blocks;
  if (row_items < want) split_columns(std::min(slivers, (want + row_items - 1) / row_items));
  const int64_t items = row_items * groups;
  thread_local std::vector<uint16_t> bp_buf;
  const int64_t bsz = bf16_packed_b_size(n, k);  // a multiple of 32 elements
  uint16_t* bp = aligned_scratch(bp_buf, batch * bsz);
  const int64_t pack_blocks = bf16_pack_b_blocks(k), pieces = batch * pack_blocks;
  auto pack = [&](int64_t piece) {
    const int64_t i = piece / pack_blocks, q = piece % pack_blocks;
    bf16_pack_b_part(n, k, o.b + i * o.sb, o.ldb, o.tb, bp + i * bsz, q, q + 1);
  };
  auto run = [&](int64_t item) {
    if (deadline_passed(deadline)) return;
    const int64_t row_item = item / groups, g = item % groups;
    const int64_t i = row_item / blocks, r0 = (row_item % blocks) * rows, mr = std::min(rows, m - r0);
    // Rows r0..r0+mr of op(A): of A [M, K], or columns of A stored [K, M] (read in place).
    const uint16_t* ai = o.a + i * o.sa + (o.ta ? r0 : r0 * o.lda);
    bf16_gemm_packed_b_columns(mr, n, k, ai, o.lda, o.ta, bp + i * bsz, out + i * m * n + r0 * n, false,
                               g * per_group * 32, (g + 1) * per_group * 32);
  };
  const int threads = static_cast<int>(std::min<int64_t>(items, want));
  in_two_phases(2 * batch * m * n * k >= (int64_t{1} << 21) ? threads : 1, pieces, pack, items, run);
}

// batch products out [batch, m, n] = op(A) op(B), entries sa and sb apart (matmul.cc's plan).
template <bool TA, bool TB>
void bf16_products(int64_t m, int64_t k, int64_t n, int64_t batch, int64_t sa, int64_t sb,
                   const uint16_t* a, const uint16_t* b, float* c) {
  // Past the step's deadline the blocks left are skipped (core/base/step_deadline.h).
  const int64_t deadline = thread_step_deadline();
  const int want = intra_op_threads();
  if (active_avx512_bf16() && k > 0) {
    // Two shapes run transposed, as C^T = op(B)^T op(A)^T: the native kernels sum each
    // element's products in the order of the depth whichever operand is which, so the bits
    // are the same (tests/bf16_gemm_test.cc).
    // - On the AMX tiles, a weight gradient x^T g with fewer columns than rows (a
    //   convolution's: the patches' width against the channels): this transposes the narrow g
    //   for the tiles' A instead of the wide x, and packs x as B by interleaving row pairs.
    // - On AVX512_BF16, a narrow product (n <= kNarrowBf16 columns, fewer than its rows: a
    //   classifier's logits and their weight gradient): its columns then fill the 12-row
    //   tile's rows, where as columns they would pad a 32-column sliver.
    const bool amx_gradient = TA && !TB && active_amx_bf16() && n < m && k >= m;
    const bool narrow = !active_amx_bf16() && n <= kNarrowBf16 && n < m;
    if (amx_gradient || narrow) {
      thread_local std::vector<float> ct;
      grow_scratch(ct, batch * m * n);
      native_products({b, sb, TB ? k : n, !TB, a, sa, TA ? m : k, !TA, n, m, k, batch}, ct.data(), deadline,
                      want);
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t r = 0; r < m; ++r)
          for (int64_t col = 0; col < n; ++col) c[(i * m + r) * n + col] = ct[(i * n + col) * m + r];
      return;
    }
    native_products({a, sa, TA ? m : k, TA, b, sb, TB ? k : n, TB, m, n, k, batch}, c, deadline, want);
    return;
  }
  // The widening path (bf16_gemm.h): each entry's B widened to f32 once, as stored, and each
  // block's rows of op(A) widened and multiplied on the packed f32 GEMM: bf16_gemm_widened_ex's
  // arithmetic on the same values.
  const int64_t rows = deadline != 0 ? deadline_block_rows(m, n, k, want) : block_rows(m, want);
  const int64_t blocks = (m + rows - 1) / rows, items = batch * blocks;
  thread_local std::vector<float> b32_buf;
  grow_scratch(b32_buf, batch * k * n);
  float* b32 = b32_buf.data();
  auto widen_b = [&](int64_t i) { std::transform(b + i * sb, b + i * sb + k * n, b32 + i * k * n, widen); };
  auto run = [&](int64_t item) {
    if (deadline_passed(deadline)) return;
    const int64_t i = item / blocks, r0 = (item % blocks) * rows, mr = std::min(rows, m - r0);
    float* ci = c + i * m * n + r0 * n;
    if (k == 0) {
      std::fill(ci, ci + mr * n, 0.f);
      return;
    }
    thread_local std::vector<float> a32;
    grow_scratch(a32, mr * k);
    const uint16_t* ai = a + i * sa;
    if (TA) {  // A stored [K, M]: its columns r0..r0+mr, kept [K, mr]
      for (int64_t p = 0; p < k; ++p)
        for (int64_t r = 0; r < mr; ++r) a32[p * mr + r] = widen(ai[p * m + r0 + r]);
    } else {
      std::transform(ai + r0 * k, ai + (r0 + mr) * k, a32.begin(), widen);
    }
    packed_sgemm(active_isa(), TA, TB, mr, n, k, a32.data(), b32 + i * k * n, ci, false, 1);
  };
  const int threads = static_cast<int>(std::min<int64_t>(items, want));
  in_two_phases(2 * batch * m * n * k >= (int64_t{1} << 21) ? threads : 1, batch, widen_b, items, run);
}

// p: [0]=M [1]=K [2]=N [3]=batch [4]=a batch stride [5]=b batch stride (matmul.cc's plan).
template <bool TA, bool TB>
void bf16_kernel(const Instr& in, const Frame& f) {
  bf16_products<TA, TB>(in.p[0], in.p[1], in.p[2], in.p[3], in.p[4], in.p[5], in.in<uint16_t>(f, 0),
                        in.in<uint16_t>(f, 1), in.output<float>(f));
}

}  // namespace

void bf16_matmul(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                 const uint16_t* b, float* c) {
  if (ta) {
    if (tb)
      bf16_products<true, true>(m, k, n, 1, 0, 0, a, b, c);
    else
      bf16_products<true, false>(m, k, n, 1, 0, 0, a, b, c);
  } else {
    if (tb)
      bf16_products<false, true>(m, k, n, 1, 0, 0, a, b, c);
    else
      bf16_products<false, false>(m, k, n, 1, 0, 0, a, b, c);
  }
}

bool select_bf16_matmul(Instr& instr) {
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  if (ta) instr.fn = tb ? bf16_kernel<true, true> : bf16_kernel<true, false>;
  else instr.fn = tb ? bf16_kernel<false, true> : bf16_kernel<false, false>;
  return true;
}

}  // namespace fjit::kernels::st
