// The f32 GEMM update on the packed driver (packed_update.h): a TileEpilogue that applies
// out = fma(alpha, P, addend) to each finished tile, copies it to the product buffer if asked
// and sums its squares into the tile's slot.
#include "core/kernels/gemm/packed_update.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/base/isa.h"
#include "core/base/threads.h"
#include "core/kernels/gemm/affine_update.h"
#include "core/kernels/gemm/packed_gemm.h"

namespace fjit::gemm_update {
namespace {

// Threads only from this many flops on, as the other GEMM paths.
constexpr int64_t kThreadFlops = int64_t{1} << 22;
// Outputs from this many bytes on have their tiles' rows prefetched (below it they stay in L2
// from the forward pass, and the prefetches cost more than they save).
constexpr int64_t kPrefetchBytes = 256 << 10;

struct Update {
  float alpha;
  int64_t form, n;
  const float* addend;  // null without one
  float* out;
  float* product;   // null unless written
  double* squares;  // per tile; null unless summed
};

// o[i] = fma(alpha, x[i], kVector ? d[i] : *d) for i < len; o may be d.
template <bool kVector>
inline void fma_row(float alpha, const float* x, const float* d, float* o, int64_t len) {
  const __m256 va = _mm256_set1_ps(alpha);
  const __m256 vd = _mm256_set1_ps(*d);
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m256 add = kVector ? _mm256_loadu_ps(d + i) : vd;
    _mm256_storeu_ps(o + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), add));
  }
  for (; i < len; ++i) o[i] = std::fma(alpha, x[i], kVector ? d[i] : *d);
}

// The sum of the squares of p's rows x cols elements: per column of 8, float fused
// multiply-adds into one of four vector accumulators (each lane then sums one square per row
// of the tile, a dozen or so terms), the accumulators added pairwise (in float, then in
// double) and a scalar tail (in double), in an order that depends on the shape only.
double tile_squares(const float* p, int64_t ldp, int64_t rows, int64_t cols) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  double tail = 0;
  const int64_t c8 = cols / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = p + r * ldp;
    for (int64_t c = 0; c < c8; c += 8) {
      const __m256 v = _mm256_loadu_ps(x + c);
      acc[(c / 8) & 3] = _mm256_fmadd_ps(v, v, acc[(c / 8) & 3]);
    }
    for (int64_t c = c8; c < cols; ++c) tail += static_cast<double>(x[c]) * x[c];
  }
  // The accumulators widened to double and added pairwise, then the four lanes.
  const __m256 s01 = _mm256_add_ps(acc[0], acc[1]), s23 = _mm256_add_ps(acc[2], acc[3]);
  const __m256d lo = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(s01)),
                                   _mm256_cvtps_pd(_mm256_castps256_ps128(s23)));
  const __m256d hi = _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(s01, 1)),
                                   _mm256_cvtps_pd(_mm256_extractf128_ps(s23, 1)));
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(lo, hi));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + tail;
}

void apply(void* ctx, const float* p, int64_t ldp, int64_t row0, int64_t col0, int64_t rows,
           int64_t cols, int64_t tile) {
  const Update& e = *static_cast<const Update*>(ctx);
  const float zero = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = p + r * ldp;
    const int64_t at = (row0 + r) * e.n + col0;
    float* o = e.out + at;
    switch (e.form) {
      case kNoAddend: fma_row<false>(e.alpha, x, &zero, o, cols); break;
      case kSameShape: fma_row<true>(e.alpha, x, e.addend + at, o, cols); break;
      case kRowVector: fma_row<true>(e.alpha, x, e.addend + col0, o, cols); break;
      case kScalarAddend: fma_row<false>(e.alpha, x, e.addend, o, cols); break;
    }
    if (e.product != nullptr) std::memcpy(e.product + at, x, cols * sizeof(float));
  }
  if (e.squares != nullptr) e.squares[tile] = tile_squares(p, ldp, rows, cols);
}

// The cache lines of rows x cols elements at x (rows ld apart).
inline void prefetch_block(const float* x, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const auto first = reinterpret_cast<uintptr_t>(x + r * ld) & ~uintptr_t{63};
    const auto last = reinterpret_cast<uintptr_t>(x + r * ld + cols - 1);
    for (uintptr_t line = first; line <= last; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
  }
}

// The tile's addend and output rows, which apply reads and writes, into L2: the kernel's run
// hides the misses of their strided lines, which the hardware prefetchers do not follow.
void prefetch(void* ctx, int64_t row0, int64_t col0, int64_t rows, int64_t cols) {
  const Update& e = *static_cast<const Update*>(ctx);
  const int64_t at = row0 * e.n + col0;
  if (e.form == kSameShape) prefetch_block(e.addend + at, e.n, rows, cols);
  if (e.form != kSameShape || e.addend != e.out) prefetch_block(e.out + at, e.n, rows, cols);
}

template <bool TA, bool TB>
void kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2], flags = in.p[7];
  const Isa isa = static_cast<Isa>(in.p[3]);
  const size_t nin = in.ins.size();
  Update e;
  e.alpha = (flags & kUnitAlpha)      ? 1.f
            : (flags & kAlphaOperand) ? *in.in<float>(f, static_cast<int>(nin) - 1)
                                      : static_cast<float>(in.attrs.scalar);
  e.form = in.p[6];
  e.n = n;
  e.addend = e.form == kNoAddend ? nullptr : in.in<float>(f, 2);
  e.out = in.output<float>(f);
  e.product = (flags & kWithProduct) ? static_cast<float*>(f.bufs[in.in_bufs[nin]]) : nullptr;
  float* sum = (flags & kWithSum)
                   ? static_cast<float*>(f.bufs[in.in_bufs[nin + ((flags & kWithProduct) ? 1 : 0)]])
                   : nullptr;
  thread_local std::vector<double> squares;
  const int64_t tiles = packed_tile_count(isa, m, n);
  if (sum != nullptr && static_cast<int64_t>(squares.size()) < tiles) squares.resize(tiles);
  e.squares = sum != nullptr ? squares.data() : nullptr;
  const int threads = 2 * m * n * k >= kThreadFlops ? intra_op_threads() : 1;
  const bool large = m * n * static_cast<int64_t>(sizeof(float)) >= kPrefetchBytes;
  packed_sgemm_tiles(isa, TA, TB, m, n, k, in.in<float>(f, 0), in.in<float>(f, 1),
                     TileEpilogue{apply, &e, large ? prefetch : nullptr}, threads);
  if (sum == nullptr) return;
  double total = 0;
  for (int64_t t = 0; t < tiles; ++t) total += squares[t];
  *sum = static_cast<float>(total);
}

}  // namespace

KernelFn packed_update_kernel(bool ta, bool tb) {
  if (ta) return tb ? kernel<true, true> : kernel<true, false>;
  return tb ? kernel<false, true> : kernel<false, false>;
}

}  // namespace fjit::gemm_update
