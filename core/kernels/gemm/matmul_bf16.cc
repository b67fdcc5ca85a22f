// The matmul op on bf16 operands (see matmul_bf16.h).
#include "core/kernels/gemm/matmul_bf16.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/base/fpe_flags.h"
#include "core/base/isa.h"
#include "core/base/threads.h"
#include "core/kernels/gemm/bf16_gemm.h"

namespace fjit::kernels::st {
namespace {

// Rows per block: a multiple of bf16_gemm's 12-row micro-tile, so a block boundary never
// changes how a row is tiled; at least kMinRows, so each block amortises packing op(B).
constexpr int64_t kTileRows = 12, kMinRows = 96, kMaxBlocks = 4;

int64_t block_rows(int64_t m) {
  const int64_t per = std::max(kMinRows, (m + kMaxBlocks - 1) / kMaxBlocks);
  return (per + kTileRows - 1) / kTileRows * kTileRows;
}

// dst [cols, rows] row-major = src [rows, cols] (row stride ld) transposed, in 32 x 32 blocks.
void transpose_into(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst) {
  constexpr int64_t kB = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kB)
    for (int64_t c0 = 0; c0 < cols; c0 += kB)
      for (int64_t c = c0; c < std::min(cols, c0 + kB); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kB); ++r) dst[c * rows + r] = src[r * ld + c];
}

// p: [0]=M [1]=K [2]=N [3]=batch [4]=a batch stride [5]=b batch stride (matmul.cc's plan).
template <bool TA, bool TB>
void bf16_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2], batch = in.p[3], sa = in.p[4], sb = in.p[5];
  const auto* a = in.in<uint16_t>(f, 0);
  const auto* b = in.in<uint16_t>(f, 1);
  float* c = in.output<float>(f);
  const int64_t rows = block_rows(m), blocks = (m + rows - 1) / rows;
  const int64_t items = batch * blocks;
  // AVX512_BF16: each batch entry's op(B) packed once (a transposed B read in place), then
  // shared by its row blocks. Otherwise (the widening path) a transposed B is copied into
  // row-major order per block.
  const bool native = active_avx512_bf16() && k > 0;
  const int64_t bsz = bf16_packed_b_size(n, k);  // a multiple of 32 elements (64 bytes)
  thread_local std::vector<uint16_t> bp_buf;
  uint16_t* bp = nullptr;
  if (native) {
    bp_buf.resize(batch * bsz + 32);
    bp = bp_buf.data() + ((64 - reinterpret_cast<uintptr_t>(bp_buf.data()) % 64) % 64) / 2;
  }
  auto pack = [&](int64_t i) { bf16_pack_b(n, k, b + i * sb, TB ? k : n, TB, bp + i * bsz); };
  auto run = [&](int64_t item) {
    const int64_t i = item / blocks, r0 = (item % blocks) * rows, mr = std::min(rows, m - r0);
    // Rows r0..r0+mr of op(A): of A [M, K], or columns of A stored [K, M] (read in place).
    const uint16_t* ai = a + i * sa + (TA ? r0 : r0 * k);
    float* ci = c + i * m * n + r0 * n;
    if (native) {
      bf16_gemm_packed_b(mr, n, k, ai, TA ? m : k, TA, bp + i * bsz, ci, false);
      return;
    }
    const uint16_t* bi = b + i * sb;
    thread_local std::vector<uint16_t> bt_buf;
    if constexpr (TB) {  // B stored [N, K]
      bt_buf.resize(k * n);
      transpose_into(bi, n, k, k, bt_buf.data());
      bi = bt_buf.data();
    }
    bf16_gemm_ex(mr, n, k, ai, TA ? m : k, TA, bi, ci, false);
  };
  const int threads = static_cast<int>(std::min<int64_t>(items, intra_op_threads()));
  if (threads > 1 && 2 * batch * m * n * k >= (int64_t{1} << 21)) {
#pragma omp parallel num_threads(threads)
    {
      if (native) {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < batch; ++i) pack(i);
      }
#pragma omp for schedule(static)
      for (int64_t item = 0; item < items; ++item) run(item);
      fpe::collect_worker_flags();
    }
  } else {
    if (native)
      for (int64_t i = 0; i < batch; ++i) pack(i);
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
