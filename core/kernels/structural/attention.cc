// Fused attention's fast kernels (core/trace/attention.h), FlashAttention-2 style.
//
// Forward: a task per (batch, head, block of kBq query rows). It walks the key blocks in order,
// kBk keys at a time: S = q_blk k_blk^T * scale, a running row maximum m and sum l, P =
// exp(S - m), out_blk = out_blk * exp(m_old - m) + P v_blk, accumulated in the output itself;
// at the end out /= l and the row's log-sum-exp m + log l goes to the last column.
// Backward: a task per (batch, head). Key blocks in order, and for each the query blocks that
// see it, in order: P = exp(S - lse) from the saved log-sum-exp, dV_blk += P^T dO, dP = dO
// v_blk^T, dS = P (dP - D) * scale with D = rowsum(dO * out) - (the lse column's cotangent),
// dQ_blk += dS k_blk, dK_blk += dS^T q_blk. Scratch is two kBq x kBk blocks per task on the
// stack, whatever the sequence lengths.
//
// Every product runs on the calling thread: f32 ones large enough on the packed GEMM
// (packed_gemm.h), others on Eigen's GEMM driver with one thread's blocking (as
// core/kernels/gemm/matmul.cc does); every row sum is a plain loop in order, and a task's sums
// run in a fixed order of blocks, so no bit depends on the intra-op thread count.
// A query row that sees no key (its batch index's length clamped to 0) is zeros with a
// log-sum-exp of -inf, and gets zero gradients.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 in Eigen's AVX-512 GEMM (matmul.cc)
#include "core/base/eigen.h"
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/base/fpe_flags.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/kernels/structural/attention_geometry.h"
#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

using Eigen::Index;
namespace ei = Eigen::internal;

constexpr int64_t kBq = 64, kBk = 64;

// Row-major c [m, n] (leading dimension ldc) += alpha * op(a) op(b), op(a) [m, k], op(b) [k, n]:
// a is row-major [m, k] (TA: [k, m], transposed), b row-major [k, n] (TB: [n, k]). Computed as
// the column-major c^T = op(b)^T op(a)^T on this thread with the blocking of one thread.
// f32 products that pay for the packing run on the packed GEMM (packed_gemm.h) on this thread:
// P = op(a) op(b) added to c (alpha 1), or c = fma(alpha, P, c) through a temporary.
template <class T, bool TA, bool TB>
void gemm_add(Index m, Index n, Index k, T alpha, const T* a, Index lda, const T* b, Index ldb, T* c,
              Index ldc) {
  if (m == 0 || n == 0 || k == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (packed_gemm_use() != PackedGemmUse::never && packed_gemm_pays(m, n, k)) {
      if (alpha == 1.f) {
        packed_sgemm_strided(active_isa(), TA, TB, m, n, k, a, lda, b, ldb, c, ldc, true, 1);
        return;
      }
      alignas(64) float p[kBq * kBk];
      if (m * n <= kBq * kBk) {
        packed_sgemm_strided(active_isa(), TA, TB, m, n, k, a, lda, b, ldb, p, n, false, 1);
        for (Index i = 0; i < m; ++i)
          for (Index j = 0; j < n; ++j) c[i * ldc + j] = std::fma(alpha, p[i * n + j], c[i * ldc + j]);
        return;
      }
    }
  }
  constexpr int kLhsOrder = TB ? Eigen::RowMajor : Eigen::ColMajor;
  constexpr int kRhsOrder = TA ? Eigen::RowMajor : Eigen::ColMajor;
  ei::gemm_blocking_space<Eigen::ColMajor, T, T, Eigen::Dynamic, Eigen::Dynamic, Eigen::Dynamic, 1, false>
      blocking(n, m, k, 1, true);
  ei::general_matrix_matrix_product<Index, T, kLhsOrder, false, T, kRhsOrder, false, Eigen::ColMajor,
                                    1>::run(n, m, k, b, ldb, a, lda, c, 1, ldc, alpha, blocking, nullptr);
}

template <class T> void forward_task(const Instr& in, const Frame& f, const AttentionGeometry& g, int64_t task) {
  const auto [q, k, v, out, bh, b, i0, rows, length] = g.forward_task<T, T>(in, f, task, kBq);
  const int64_t pw = g.dv + 1;
  alignas(64) T s[kBq * kBk];
  T m[kBq], l[kBq];
  int64_t lens[kBq];
  int64_t max_len = 0;
  for (int64_t r = 0; r < rows; ++r) {
    lens[r] = g.row_length(length, i0 + r);
    max_len = std::max(max_len, lens[r]);
    m[r] = -std::numeric_limits<T>::infinity();
    l[r] = 0;
    std::fill_n(out + r * pw, g.dv, T(0));
  }
  const T scale = static_cast<T>(in.attrs.scalar);
  for (int64_t j0 = 0; j0 < max_len; j0 += kBk) {
    const int64_t cols = std::min(kBk, max_len - j0);
    std::fill_n(s, rows * cols, T(0));
    gemm_add<T, false, true>(rows, cols, g.dh, scale, q, g.dh, k + j0 * g.dh, g.dh, s, cols);
    for (int64_t r = 0; r < rows; ++r) {
      T* row = s + r * cols;
      const int64_t valid = std::clamp<int64_t>(lens[r] - j0, 0, cols);
      if (valid == 0) {
        std::fill_n(row, cols, T(0));
        continue;
      }
      T mx = m[r];
      for (int64_t c = 0; c < valid; ++c) mx = std::max(mx, row[c]);
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> p(row, valid);
      p = (p - mx).exp();
      std::fill(row + valid, row + cols, T(0));
      T sum = 0;
      for (int64_t c = 0; c < valid; ++c) sum += row[c];
      const T alpha = std::exp(m[r] - mx);  // 0 on the first block the row sees
      l[r] = l[r] * alpha + sum;
      m[r] = mx;
      if (alpha != T(1))
        for (int64_t c = 0; c < g.dv; ++c) out[r * pw + c] *= alpha;
    }
    gemm_add<T, false, false>(rows, g.dv, cols, T(1), s, cols, v + j0 * g.dv, g.dv, out, pw);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* o = out + r * pw;
    if (lens[r] <= 0) {
      o[g.dv] = -std::numeric_limits<T>::infinity();
      continue;
    }
    const T inv = T(1) / l[r];
    for (int64_t c = 0; c < g.dv; ++c) o[c] *= inv;
    o[g.dv] = m[r] + std::log(l[r]);
  }
}

template <class T>
void backward_task(const Instr& in, const Frame& f, const AttentionGeometry& g, int64_t bh, int64_t deadline) {
  const auto [q, k, v, out, dout, dq, dk, dv, b, length, max_len] = g.backward_task<T, T>(in, f, bh);
  const int64_t pw = g.dv + 1;
  const T scale = static_cast<T>(in.attrs.scalar);
  alignas(64) T s[kBq * kBk];
  alignas(64) T dp[kBq * kBk];
  for (int64_t j0 = 0; j0 < max_len; j0 += kBk) {
    if (deadline_passed(deadline)) [[unlikely]] return;  // the key blocks left are skipped
    const int64_t cols = std::min(kBk, max_len - j0);
    // The first query row that sees key j0: rows before it see none of this block.
    const int64_t first = g.causal ? std::max<int64_t>(0, j0 - (g.tk - g.tq)) : 0;
    for (int64_t i0 = first / kBq * kBq; i0 < g.tq; i0 += kBq) {
      const int64_t rows = std::min(kBq, g.tq - i0);
      std::fill_n(s, rows * cols, T(0));
      gemm_add<T, false, true>(rows, cols, g.dh, scale, q + i0 * g.dh, g.dh, k + j0 * g.dh, g.dh, s, cols);
      for (int64_t r = 0; r < rows; ++r) {
        T* row = s + r * cols;
        const int64_t valid = std::clamp<int64_t>(g.row_length(length, i0 + r) - j0, 0, cols);
        if (valid > 0) {
          Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> p(row, valid);
          p = (p - out[(i0 + r) * pw + g.dv]).exp();
        }
        std::fill(row + valid, row + cols, T(0));
      }
      const T* dob = dout + i0 * pw;
      gemm_add<T, true, false>(cols, g.dv, rows, T(1), s, cols, dob, pw, dv + j0 * g.dv, g.dv);
      std::fill_n(dp, rows * cols, T(0));
      gemm_add<T, false, true>(rows, cols, g.dv, T(1), dob, pw, v + j0 * g.dv, g.dv, dp, cols);
      for (int64_t r = 0; r < rows; ++r) {
        const T* o = out + (i0 + r) * pw;
        const T* d = dob + r * pw;
        T dr = 0;
        for (int64_t c = 0; c < g.dv; ++c) dr += d[c] * o[c];
        dr -= d[g.dv];
        T* pr = s + r * cols;
        T* dpr = dp + r * cols;
        for (int64_t c = 0; c < cols; ++c) dpr[c] = pr[c] * (dpr[c] - dr) * scale;
      }
      gemm_add<T, false, false>(rows, g.dh, cols, T(1), dp, cols, k + j0 * g.dh, g.dh, dq + i0 * g.dh, g.dh);
      gemm_add<T, true, false>(cols, g.dh, rows, T(1), dp, cols, q + i0 * g.dh, g.dh, dk + j0 * g.dh, g.dh);
    }
  }
}

template <class T> void attention_kernel(const Instr& in, const Frame& f) {
  const AttentionGeometry g(in);
  run_attention_tasks(
      in, g, kBq, [&](int64_t t) { forward_task<T>(in, f, g, t); },
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
