// Fused attention's fast kernels (core/trace/attention.h), FlashAttention-2 style.
//
// Forward: a task per (batch, head, block of kFq query rows). It walks the key blocks in order,
// kFk keys at a time: S = q_blk k_blk^T * scale, a running row maximum m and sum l, P =
// exp(S - m), out_blk = out_blk * exp(m_old - m) + P v_blk, accumulated in the output itself;
// at the end out /= l and the row's log-sum-exp m + log l goes to the last column.
// Backward: a task per (batch, head). D = rowsum(dO * out) - (the lse column's cotangent) once
// per query row; then key blocks of kBk keys in order, and for each the query rows that see
// it, kBq at a time in order: P = exp(S - lse) from the saved log-sum-exp, dV_blk += P^T dO,
// dP = dO v_blk^T, dS = P (dP - D) * scale, dQ_blk += dS k_blk, dK_blk += dS^T q_blk. Scratch
// is per thread and bounded by the block sizes (and Tq for D), whatever the key length.
//
// Every product runs on the calling thread: f32 ones large enough on the packed GEMM
// (packed_gemm.h), others on Eigen's GEMM driver with one thread's blocking (as
// core/kernels/gemm/matmul.cc does); every row's max and sum is Eigen's over the row's
// elements (the same order for the same row length and place), and a task's sums run in a
// fixed order of blocks, so no bit depends on the intra-op thread count.
// A query row that sees no key (its batch index's length clamped to 0) is zeros with a
// log-sum-exp of -inf, and gets zero gradients.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 in Eigen's AVX-512 GEMM (matmul.cc)
#include "core/base/eigen.h"
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/base/fpe_flags.h"
#include "core/base/scratch.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/kernels/structural/attention_geometry.h"
#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

using Eigen::Index;
namespace ei = Eigen::internal;

// Forward: query blocks of kFq rows (whole 12-row tiles of the packed GEMM's AVX-512 kernel)
// against key blocks of up to kFk keys. Backward: key blocks of kBk keys against the query rows
// that see them, kBq rows at a time.
constexpr int64_t kFq = 60, kFk = 256, kBk = 64, kBq = 256;

// Row-major c [m, n] (leading dimension ldc) = op(a) op(b) (add: c += op(a) op(b)), op(a)
// [m, k], op(b) [k, n]: a is row-major [m, k] (TA: [k, m], transposed), b row-major [k, n]
// (TB: [n, k]). f32 products that pay for the packing run on the packed GEMM (packed_gemm.h),
// others on Eigen's GEMM driver as the column-major c^T = op(b)^T op(a)^T; both on this thread
// with the blocking of one thread.
template <class T, bool TA, bool TB>
void gemm(Index m, Index n, Index k, const T* a, Index lda, const T* b, Index ldb, T* c, Index ldc,
          bool add) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (k > 0 && packed_gemm_use() != PackedGemmUse::never && packed_gemm_pays(m, n, k)) {
      packed_sgemm_strided(active_isa(), TA, TB, m, n, k, a, lda, b, ldb, c, ldc, add, 1);
      return;
    }
  }
  if (!add)
    for (Index i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, T(0));
  if (k == 0) return;
  constexpr int kLhsOrder = TB ? Eigen::RowMajor : Eigen::ColMajor;
  constexpr int kRhsOrder = TA ? Eigen::RowMajor : Eigen::ColMajor;
  ei::gemm_blocking_space<Eigen::ColMajor, T, T, Eigen::Dynamic, Eigen::Dynamic, Eigen::Dynamic, 1, false>
      blocking(n, m, k, 1, true);
  ei::general_matrix_matrix_product<Index, T, kLhsOrder, false, T, kRhsOrder, false, Eigen::ColMajor,
                                    1>::run(n, m, k, b, ldb, a, lda, c, 1, ldc, T(1), blocking, nullptr);
}

template <class T>
using Row = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

// Per-thread scratch, aligned to 64 bytes on every thread (core/base/scratch.h): Eigen's
// vectorized row sums start from the first aligned element, so a row's sum depends on where
// the row starts.
template <class T>
T* scratch(int slot, int64_t n) {
  thread_local std::vector<T> buffers[3];
  return aligned_scratch(buffers[slot], n);
}

template <class T> void forward_task(const Instr& in, const Frame& f, const AttentionGeometry& g, int64_t task) {
  const auto [q, k, v, out, bh, b, i0, rows, length] = g.forward_task<T, T>(in, f, task, kFq);
  const int64_t pw = g.dv + 1;
  T* s = scratch<T>(0, kFq * kFk);
  T m[kFq], l[kFq];
  int64_t lens[kFq];
  int64_t max_len = 0;
  for (int64_t r = 0; r < rows; ++r) {
    lens[r] = g.row_length(length, i0 + r);
    max_len = std::max(max_len, lens[r]);
    m[r] = -std::numeric_limits<T>::infinity();
    l[r] = 0;
    std::fill_n(out + r * pw, g.dv, T(0));
  }
  const T scale = static_cast<T>(in.attrs.scalar);
  for (int64_t j0 = 0; j0 < max_len; j0 += kFk) {
    const int64_t cols = std::min(kFk, max_len - j0);
    gemm<T, false, true>(rows, cols, g.dh, q, g.dh, k + j0 * g.dh, g.dh, s, cols, false);
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * cols;
      const int64_t valid = std::clamp<int64_t>(lens[r] - j0, 0, cols);
      std::fill(row + valid, row + cols, T(0));
      if (valid == 0) continue;
      Row<T> p(row, valid);
      p *= scale;
      const T mx = std::max(m[r], p.maxCoeff());
      p = (p - mx).exp();
      const T alpha = std::exp(m[r] - mx);  // 0 on the first block the row sees
      l[r] = l[r] * alpha + p.sum();
      m[r] = mx;
      if (alpha != T(1)) Row<T>(out + r * pw, g.dv) *= alpha;
    }
    gemm<T, false, false>(rows, g.dv, cols, s, cols, v + j0 * g.dv, g.dv, out, pw, true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* o = out + r * pw;
    if (lens[r] <= 0) {
      o[g.dv] = -std::numeric_limits<T>::infinity();
      continue;
    }
    Row<T>(o, g.dv) *= T(1) / l[r];
    o[g.dv] = m[r] + std::log(l[r]);
  }
}

template <class T>
void backward_task(const Instr& in, const Frame& f, const AttentionGeometry& g, int64_t bh, int64_t deadline) {
  const auto [q, k, v, out, dout, dq, dk, dv, b, length, max_len] = g.backward_task<T, T>(in, f, bh);
  const int64_t pw = g.dv + 1;
  const T scale = static_cast<T>(in.attrs.scalar);
  T* s = scratch<T>(0, kBq * kBk);
  T* dp = scratch<T>(1, kBq * kBk);
  // D = rowsum(dO * out) - (the lse column's cotangent), once per query row.
  T* d = scratch<T>(2, g.tq);
  for (int64_t i = 0; i < g.tq; ++i) {
    const T* o = out + i * pw;
    const T* dr = dout + i * pw;
    T sum = 0;
    for (int64_t c = 0; c < g.dv; ++c) sum += dr[c] * o[c];
    d[i] = sum - dr[g.dv];
  }
  for (int64_t j0 = 0; j0 < max_len; j0 += kBk) {
    if (deadline_passed(deadline)) [[unlikely]] return;  // the key blocks left are skipped
    const int64_t cols = std::min(kBk, max_len - j0);
    // The first query row that sees key j0: rows before it see none of this block.
    const int64_t first = g.causal ? std::max<int64_t>(0, j0 - (g.tk - g.tq)) : 0;
    for (int64_t i0 = first / kBk * kBk; i0 < g.tq; i0 += kBq) {
      const int64_t rows = std::min(kBq, g.tq - i0);
      gemm<T, false, true>(rows, cols, g.dh, q + i0 * g.dh, g.dh, k + j0 * g.dh, g.dh, s, cols, false);
      for (int64_t r = 0; r < rows; ++r) {
        T* row = s + r * cols;
        const int64_t valid = std::clamp<int64_t>(g.row_length(length, i0 + r) - j0, 0, cols);
        if (valid > 0) {
          Row<T> p(row, valid);
          p = (p * scale - out[(i0 + r) * pw + g.dv]).exp();
        }
        std::fill(row + valid, row + cols, T(0));
      }
      const T* dob = dout + i0 * pw;
      gemm<T, true, false>(cols, g.dv, rows, s, cols, dob, pw, dv + j0 * g.dv, g.dv, true);
      gemm<T, false, true>(rows, cols, g.dv, dob, pw, v + j0 * g.dv, g.dv, dp, cols, false);
      for (int64_t r = 0; r < rows; ++r) {
        Row<T> dpr(dp + r * cols, cols);
        dpr = Row<T>(s + r * cols, cols) * (dpr - d[i0 + r]) * scale;
      }
      gemm<T, false, false>(rows, g.dh, cols, dp, cols, k + j0 * g.dh, g.dh, dq + i0 * g.dh, g.dh, true);
      gemm<T, true, false>(cols, g.dh, rows, dp, cols, q + i0 * g.dh, g.dh, dk + j0 * g.dh, g.dh, true);
    }
  }
}

template <class T> void attention_kernel(const Instr& in, const Frame& f) {
  const AttentionGeometry g(in);
  run_attention_tasks(
      in, g, kFq, [&](int64_t t) { forward_task<T>(in, f, g, t); },
      [&](int64_t bh, int64_t deadline) { backward_task<T>(in, f, g, bh, deadline); });
}

}  // namespace

bool select_attention(Instr& instr) {
  assert(instr.op == Op::Attention || instr.op == Op::AttentionGrad);
  AttentionGeometry::fill(instr);
  if (instr.ins[0].dtype == DType::bf16) {  // bf16 q, k, v: bf16 block products, f32 results
    instr.fn = &attention_bf16_kernel;
    return instr.out.dtype == DType::f32;
  }
  switch (instr.out.dtype) {
    case DType::f32: instr.fn = &attention_kernel<float>; return true;
    case DType::f64: instr.fn = &attention_kernel<double>; return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
