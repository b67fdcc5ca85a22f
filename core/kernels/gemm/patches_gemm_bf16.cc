// bf16 convolution products without their patches (patches_gemm.h, attrs.index 0): op(A) =
// patches(x) or patches(x)^T of a bf16 image, gathered a block of patches rows at a time into
// a buffer that stays in cache, and multiplied there on AVX512_BF16 (bf16_gemm.h).
//
// Bits: those of the bf16 matmul op (matmul_bf16.h) over the materialized patches.
//   Forward, patches(x) . op(W): a row's arithmetic does not depend on the rows multiplied
//     beside it, so each block of rows is a product of its own.
//   Weight gradient, patches(x)^T . op(g): the depth (pixels) goes in chunks of whole depth
//     blocks (bf16_layout.h's kPairs pairs), each added into C as its own product; the full
//     product also sums each depth block from zero and adds it into C in order, so the sums
//     are the same.
// Elsewhere (the AMX tiles, whose accumulator spans the whole depth, or the widening path, where
// a plan made on one path runs after the path was changed), the patches are materialized in
// a scratch buffer and multiplied by the matmul op's own code.
#include <algorithm>
#include <vector>

#include "core/base/isa.h"
#include "core/base/scratch.h"
#include "core/base/step_deadline.h"
#include "core/ir/convert.h"
#include "core/kernels/gemm/bf16_gemm.h"
#include "core/kernels/gemm/bf16_layout.h"
#include "core/kernels/gemm/matmul_bf16.h"
#include "core/kernels/gemm/patches_gemm.h"
#include "core/kernels/split_work.h"

namespace fjit {
namespace {

// Bytes of gathered patches a block of rows holds: with the packed op(B) and the tiles'
// C, within L2.
constexpr int64_t kBlockBytes = int64_t{256} << 10;
// The weight gradient's depth per chunk: whole depth blocks (2 * kPairs pixels each).
constexpr int64_t kDepthChunk = 4 * kPairs;

// p[0] = M, p[1] = K, p[2] = N (select_patches_matmul).
template <bool TA, bool TB>
void bf16_patches_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2];
  PatchesOperand o = patches_geometry(in);
  o.x_bf16 = in.in<uint16_t>(f, 0);
  o.pad_bf16 = convert_element<bf16_t>(in.attrs.scalar).bits;
  const uint16_t* b = in.in<uint16_t>(f, 1);
  float* c = in.output<float>(f);
  const int64_t pixels = o.pixels(), taps = o.taps();
  if (!active_avx512_bf16() || active_amx_bf16()) {
    thread_local std::vector<uint16_t> cols;
    grow_scratch(cols, pixels * taps);
    o.block(0, pixels, 0, taps, cols.data(), taps);
    kernels::st::bf16_matmul(TA, TB, m, n, k, cols.data(), b, c);
    return;
  }
  if (k == 0) {  // no depth (no pixels): C is zero
    std::fill(c, c + m * n, 0.f);
    return;
  }
  const int64_t ldb = TB ? k : n;
  // Past the step's deadline the blocks left are skipped (core/base/step_deadline.h).
  const int64_t deadline = thread_step_deadline();
  if constexpr (!TA) {
    // Rows of C in blocks of whole 12-row slivers, op(W) packed once and shared.
    thread_local std::vector<uint16_t> packed;
    uint16_t* wp = aligned_scratch(packed, bf16_packed_b_size(n, k));
    bf16_pack_b(n, k, b, ldb, TB, wp);
    const int64_t rows = std::max<int64_t>(12, kBlockBytes / (2 * k) / 12 * 12);
    const int64_t blocks = (m + rows - 1) / rows;
    kernels::split_work(blocks, m * (k + n), [&](int64_t b0, int64_t b1) {
      thread_local std::vector<uint16_t> buf;
      uint16_t* a = aligned_scratch(buf, rows * k);
      for (int64_t blk = b0; blk < b1 && !deadline_passed(deadline); ++blk) {
        const int64_t r0 = blk * rows, nr = std::min(rows, m - r0);
        o.block(r0, nr, 0, k, a, k);
        bf16_gemm_packed_b(nr, n, k, a, k, false, wp, c + r0 * n, false);
      }
    });
  } else {
    // C's rows (taps) split over the threads in whole slivers; each thread walks the depth in
    // chunks, gathering its taps of the chunk's patches and packing the chunk of op(g).
    const int64_t slivers = (m + 11) / 12;
    kernels::split_work(slivers, m * n + k * (m + n), [&](int64_t s0, int64_t s1) {
      const int64_t t0 = 12 * s0, t1 = std::min(m, 12 * s1), width = t1 - t0;
      thread_local std::vector<uint16_t> buf, packed;
      uint16_t* a = aligned_scratch(buf, kDepthChunk * width);
      uint16_t* gp = aligned_scratch(packed, bf16_packed_b_size(n, kDepthChunk));
      for (int64_t p0 = 0; p0 < k && !deadline_passed(deadline); p0 += kDepthChunk) {
        const int64_t np = std::min(kDepthChunk, k - p0);
        o.block(p0, np, t0, width, a, width);
        bf16_pack_b(n, np, TB ? b + p0 : b + p0 * n, ldb, TB, gp);
        bf16_gemm_packed_b(width, n, np, a, width, true, gp, c + t0 * n, p0 > 0);
      }
    });
  }
}

}  // namespace

KernelFn bf16_patches_matmul_kernel(bool ta, bool tb) {
  if (ta) return tb ? bf16_patches_kernel<true, true> : bf16_patches_kernel<true, false>;
  return tb ? bf16_patches_kernel<false, true> : bf16_patches_kernel<false, false>;
}

}  // namespace fjit
