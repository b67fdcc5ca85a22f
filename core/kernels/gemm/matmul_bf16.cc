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

// Rows per block: a multiple of bf16_gemm's 12-row micro-tile, so a block boundary never
// changes how a row is tiled; at least kMinRows, so each block amortises packing op(B).
constexpr int64_t kTileRows = 12, kMinRows = 96, kMaxBlocks = 4;

// With `threads` threads, the blocks are made a multiple of the thread count where there are
// micro-tiles enough, so that no thread idles while another runs a last block (a product
// of a few hundred rows and a deep K: the weight gradients). Which rows share a block changes
// no bit (below), so the blocks may follow the thread count.
int64_t block_rows(int64_t m, int threads) {
  const int64_t per = std::max(kMinRows, (m + kMaxBlocks - 1) / kMaxBlocks);
  const int64_t rows = (per + kTileRows - 1) / kTileRows * kTileRows;
  const int64_t tiles = (m + kTileRows - 1) / kTileRows, blocks = (m + rows - 1) / rows;
  if (threads <= 1 || blocks % threads == 0 || blocks >= 2 * threads * kMaxBlocks) return rows;
  const int64_t even = std::min(tiles, (blocks + threads - 1) / threads * threads);
  return (tiles + even - 1) / even * kTileRows;
}

// Under a step deadline: blocks of about kDeadlineFlops (whole micro-tiles), so that the
// deadline is asked at a bounded interval however large the product. A row's arithmetic does
// not depend on its block, so the bits are those of block_rows' blocks.
constexpr int64_t kDeadlineFlops = int64_t{1} << 28;
int64_t deadline_block_rows(int64_t m, int64_t n, int64_t k, int threads) {
  const int64_t per_row = std::max<int64_t>(1, 2 * n * k);
  const int64_t rows = std::max<int64_t>(kTileRows, kDeadlineFlops / per_row / kTileRows * kTileRows);
  return std::min(block_rows(m, threads), rows);
}

float widen(uint16_t x) {
  const uint32_t bits = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// p: [0]=M [1]=K [2]=N [3]=batch [4]=a batch stride [5]=b batch stride (matmul.cc's plan).
template <bool TA, bool TB>
void bf16_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2], batch = in.p[3], sa = in.p[4], sb = in.p[5];
  const auto* a = in.in<uint16_t>(f, 0);
  const auto* b = in.in<uint16_t>(f, 1);
  float* c = in.output<float>(f);
  // Past the step's deadline the blocks left are skipped (core/base/step_deadline.h).
  const int64_t deadline = thread_step_deadline();
  const int want = intra_op_threads();
  const int64_t rows = deadline != 0 ? deadline_block_rows(m, n, k, want) : block_rows(m, want);
  const int64_t blocks = (m + rows - 1) / rows;
  const int64_t items = batch * blocks;
  // AVX512_BF16: each batch entry's op(B) packed once (a transposed B read in place), then
  // shared by its row blocks. Otherwise (the widening path, bf16_gemm.h) each entry's B is
  // widened to f32 once, as stored, and each block's rows of op(A) are widened and multiplied
  // on the packed f32 GEMM: bf16_gemm_widened_ex's arithmetic on the same values.
  const bool native = active_avx512_bf16() && k > 0;
  thread_local std::vector<uint16_t> bp_buf;
  thread_local std::vector<float> b32_buf;
  const int64_t bsz = native ? bf16_packed_b_size(n, k) : k * n;  // native: a multiple of 32 elements
  uint16_t* bp = nullptr;
  float* b32 = nullptr;
  if (native) {
    bp_buf.resize(batch * bsz + 32);
    bp = bp_buf.data() + ((64 - reinterpret_cast<uintptr_t>(bp_buf.data()) % 64) % 64) / 2;
  } else {
    b32_buf.resize(batch * bsz);
    b32 = b32_buf.data();
  }
  // Packing op(B) in pieces (an entry's depth blocks, native), shared by the threads.
  const int64_t pack_blocks = native ? bf16_pack_b_blocks(k) : 1, pieces = batch * pack_blocks;
  auto pack = [&](int64_t piece) {
    const int64_t i = piece / pack_blocks, q = piece % pack_blocks;
    if (native) bf16_pack_b_part(n, k, b + i * sb, TB ? k : n, TB, bp + i * bsz, q, q + 1);
    else std::transform(b + i * sb, b + i * sb + k * n, b32 + i * bsz, widen);
  };
  auto run = [&](int64_t item) {
    if (deadline_passed(deadline)) return;
    const int64_t i = item / blocks, r0 = (item % blocks) * rows, mr = std::min(rows, m - r0);
    float* ci = c + i * m * n + r0 * n;
    if (native) {
      // Rows r0..r0+mr of op(A): of A [M, K], or columns of A stored [K, M] (read in place).
      const uint16_t* ai = a + i * sa + (TA ? r0 : r0 * k);
      bf16_gemm_packed_b(mr, n, k, ai, TA ? m : k, TA, bp + i * bsz, ci, false);
      return;
    }
    if (k == 0) {
      std::fill(ci, ci + mr * n, 0.f);
      return;
    }
    thread_local std::vector<float> a32;
    a32.resize(mr * k);
    const uint16_t* ai = a + i * sa;
    if (TA) {  // A stored [K, M]: its columns r0..r0+mr, kept [K, mr]
      for (int64_t p = 0; p < k; ++p)
        for (int64_t r = 0; r < mr; ++r) a32[p * mr + r] = widen(ai[p * m + r0 + r]);
    } else {
      std::transform(ai + r0 * k, ai + (r0 + mr) * k, a32.begin(), widen);
    }
    packed_sgemm(active_isa(), TA, TB, mr, n, k, a32.data(), b32 + i * bsz, ci, false, 1);
  };
  const int threads = static_cast<int>(std::min<int64_t>(items, want));
  if (threads > 1 && 2 * batch * m * n * k >= (int64_t{1} << 21)) {
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < pieces; ++i) pack(i);
#pragma omp for schedule(static)
      for (int64_t item = 0; item < items; ++item) run(item);
      fpe::collect_worker_flags();
    }
  } else {
    for (int64_t i = 0; i < pieces; ++i) pack(i);
    for (int64_t item = 0; item < items; ++item) run(item);
  }
}

}  // namespace

bool select_bf16_matmul(Instr& instr) {
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  if (ta) instr.fn = tb ? bf16_kernel<true, true> : bf16_kernel<true, false>;
  else instr.fn = tb ? bf16_kernel<false, true> : bf16_kernel<false, false>;
  return true;
}

}  // namespace fjit::kernels::st
