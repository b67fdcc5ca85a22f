// softmax_xent and softmax_xent_grad (core/ir/ops.def): the cross entropy of logits rows
// [N, V] against labels [N], and its VJP, without any [N, V] intermediate.
//
// Each row's log-sum-exp is one streaming pass over chunks of kChunk logits: the chunk's
// maximum, a rescale of the running sum when it rises, then the chunk's exp(x - m) summed
// (Eigen's vectorised exp and sum, a fixed tree per chunk length); the running sum is kept in
// double. Then
//   loss[r]    = (m - x[r, label]) + log(s)
//   grad[r, :] = (exp(x[r, :] - lse) - onehot(label)) * ct[r]        (lse = m + log(s))
// the gradient in one exp pass (xent_grad_rows says how),
// and a row whose label is outside [0, V) gets loss 0 and a zero gradient row. A NaN or an
// infinity among a row's logits makes its loss NaN, as the composition
// logsumexp(x) - x[label] does. Short f32 rows of finite logits take a path in registers
// (small_row). Rows are split among the intra-op threads in whole rows, each
// computed the same way on any thread, so no bit depends on the thread count.
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/base/eigen.h"
#include "core/base/fpe_flags.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"
#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

constexpr int64_t kChunk = 512;
// Elements (rows x V) from which the rows are split among the intra-op threads.
constexpr int64_t kParallelElems = int64_t{1} << 18;

template <class T> using Row = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// The running maximum m and sum s of exp(x - m) of one row.
template <class T> void row_lse(const T* x, int64_t v, double& m_out, double& s_out) {
  T m = -std::numeric_limits<T>::infinity();
  double s = 0;
  for (int64_t j = 0; j < v; j += kChunk) {
    const Row<T> chunk(x + j, std::min(kChunk, v - j));
    const T cm = chunk.maxCoeff();
    if (cm > m) {
      if (j > 0) s *= std::exp(static_cast<double>(m) - static_cast<double>(cm));  // s is 0 before
      m = cm;
    }
    s += static_cast<double>((chunk - m).exp().sum());
  }
  m_out = static_cast<double>(m);
  s_out = s;
}

// Rows of at most kSmallV f32 logits (a classifier's, V = 10) in registers: two vectors, the
// lanes past V masked out. The maximum, then e = exp(x - m) by Eigen's vectorised exp (the one
// its arrays use) with zeros past V, and s = their sum, added lane-wise and then in a fixed
// tree. False, with nothing computed, when a logit is not finite: the general path then gives
// the NaN loss and gradient described above. The same instructions on every CPU (AVX2, the
// build's baseline), so the bits depend on the row alone.
constexpr int64_t kSmallV = 16;

inline __m256i lanes_below(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::max<int64_t>(n, 0))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

struct SmallRow {
  __m256i k0, k1;  // lanes < V
  __m256 e0, e1;   // exp(x - m), zero past V
  double m, s;
};

inline bool small_row(const float* x, int64_t v, SmallRow& r) {
  namespace ei = Eigen::internal;
  r.k0 = lanes_below(std::min<int64_t>(v, 8));
  r.k1 = lanes_below(v - 8);
  const __m256 x0 = _mm256_maskload_ps(x, r.k0), x1 = _mm256_maskload_ps(x + 8, r.k1);
  const __m256 zero = _mm256_setzero_ps();
  // x - x is 0 for a finite x (and for the zeros past V), NaN otherwise.
  const int finite = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(x0, x0), zero, _CMP_EQ_OQ)) &
                     _mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(x1, x1), zero, _CMP_EQ_OQ));
  if (finite != 0xff) return false;
  const __m256 low = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 mx = _mm256_max_ps(_mm256_blendv_ps(low, x0, _mm256_castsi256_ps(r.k0)),
                            _mm256_blendv_ps(low, x1, _mm256_castsi256_ps(r.k1)));
  mx = _mm256_max_ps(mx, _mm256_permute2f128_ps(mx, mx, 1));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
  mx = _mm256_max_ps(mx, _mm256_shuffle_ps(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));  // every lane
  r.e0 = _mm256_and_ps(ei::pexp<ei::Packet8f>(_mm256_sub_ps(x0, mx)), _mm256_castsi256_ps(r.k0));
  r.e1 = _mm256_and_ps(ei::pexp<ei::Packet8f>(_mm256_sub_ps(x1, mx)), _mm256_castsi256_ps(r.k1));
  __m256 t = _mm256_add_ps(r.e0, r.e1);
  t = _mm256_add_ps(t, _mm256_permute2f128_ps(t, t, 1));
  t = _mm256_add_ps(t, _mm256_shuffle_ps(t, t, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm256_add_ps(t, _mm256_shuffle_ps(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
  r.m = static_cast<double>(_mm256_cvtss_f32(mx));
  r.s = static_cast<double>(_mm256_cvtss_f32(t));
  return true;
}

// p: [0]=rows [1]=V
template <class T> void xent_rows(const Instr& in, const Frame& f, int64_t lo, int64_t hi) {
  const int64_t v = in.p[1];
  const T* x = in.in<T>(f, 0);
  const int32_t* labels = in.in<int32_t>(f, 1);
  T* out = in.output<T>(f);
  for (int64_t r = lo; r < hi; ++r) {
    const int32_t k = labels[r];
    if (k < 0 || k >= v) {
      out[r] = T(0);
      continue;
    }
    double m, s;
    SmallRow sr;
    if constexpr (std::is_same_v<T, float>) {
      if (v <= kSmallV && small_row(x + r * v, v, sr)) {
        out[r] = static_cast<T>((sr.m - static_cast<double>(x[r * v + k])) + std::log(sr.s));
        continue;
      }
    }
    row_lse(x + r * v, v, m, s);
    out[r] = static_cast<T>((m - static_cast<double>(x[r * v + k])) + std::log(s));
  }
}

// One exp pass per row: each chunk's exp(x - m_chunk) is written to the gradient row as the
// running maximum m_chunk stands when the chunk is read, then every chunk is scaled by
// exp(m_chunk - m) * ct / s once the row's m and s are known (a multiply over a row that is
// still in cache). Rows of more than kMaxChunks chunks take two exp passes instead.
constexpr int64_t kMaxChunks = 256;

template <class T> void xent_grad_rows(const Instr& in, const Frame& f, int64_t lo, int64_t hi) {
  const int64_t v = in.p[1];
  const T* x = in.in<T>(f, 0);
  const int32_t* labels = in.in<int32_t>(f, 1);
  const T* ct = in.in<T>(f, 2);
  T* out = in.output<T>(f);
  using Out = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
  T chunk_max[kMaxChunks];
  for (int64_t r = lo; r < hi; ++r) {
    Out g(out + r * v, v);
    const int32_t k = labels[r];
    if (k < 0 || k >= v) {
      g.setZero();
      continue;
    }
    const T* row = x + r * v;
    const T c = ct[r];
    if constexpr (std::is_same_v<T, float>) {
      SmallRow sr;
      if (v <= kSmallV && small_row(row, v, sr)) {
        const __m256 scale =
            _mm256_set1_ps(static_cast<float>((1.0 / sr.s) * static_cast<double>(c)));
        // Through a buffer, not masked stores (which some CPUs, AMD's, run slowly).
        alignas(32) float buf[kSmallV];
        _mm256_store_ps(buf, _mm256_mul_ps(sr.e0, scale));
        _mm256_store_ps(buf + 8, _mm256_mul_ps(sr.e1, scale));
        std::memcpy(g.data(), buf, static_cast<size_t>(v) * sizeof(float));
        g[k] -= c;
        continue;
      }
    }
    if (v > kMaxChunks * kChunk) {
      double m, s;
      row_lse(row, v, m, s);
      const T lse = static_cast<T>(m + std::log(s));
      g = (Row<T>(row, v) - lse).exp() * c;
      g[k] = (std::exp(row[k] - lse) - T(1)) * c;
      continue;
    }
    T m = -std::numeric_limits<T>::infinity();
    double s = 0;
    for (int64_t j = 0, n = 0; j < v; j += kChunk, ++n) {
      const int64_t len = std::min(kChunk, v - j);
      const Row<T> chunk(row + j, len);
      const T cm = chunk.maxCoeff();
      if (cm > m) {
        if (j > 0)
          s *= std::exp(static_cast<double>(m) - static_cast<double>(cm));  // s is 0 before
        m = cm;
      }
      Out part(g.data() + j, len);
      part = (chunk - m).exp();
      s += static_cast<double>(part.sum());
      chunk_max[n] = m;
    }
    for (int64_t j = 0, n = 0; j < v; j += kChunk, ++n) {
      // exp(0) is 1 exactly: a chunk whose maximum is the row's (a finite one) skips the call.
      const double rel = chunk_max[n] == m && std::isfinite(m)
                             ? 1.0
                             : std::exp(static_cast<double>(chunk_max[n]) - static_cast<double>(m));
      const double scale = rel / s;
      Out(g.data() + j, std::min(kChunk, v - j)) *= static_cast<T>(scale * static_cast<double>(c));
    }
    g[k] -= c;
  }
}

template <class T, bool Grad> void run(const Instr& in, const Frame& f) {
  const int64_t rows = in.p[0], v = in.p[1];
  // Rows are independent: past the step's deadline (core/base/step_deadline.h, asked before
  // each block of rows of about kDeadlineElems logits) the blocks left are skipped.
  constexpr int64_t kDeadlineElems = int64_t{1} << 16;
  const int64_t deadline = thread_step_deadline();
  const int64_t block = std::max<int64_t>(1, kDeadlineElems / std::max<int64_t>(1, v));
  auto part = [&](int64_t lo, int64_t hi) {
    for (int64_t r0 = lo; r0 < hi; r0 += block) {
      if (deadline_passed(deadline)) [[unlikely]] return;
      const int64_t r1 = std::min(hi, r0 + block);
      if constexpr (Grad) xent_grad_rows<T>(in, f, r0, r1);
      else xent_rows<T>(in, f, r0, r1);
    }
  };
  const int threads = rows * v >= kParallelElems
                          ? static_cast<int>(std::min<int64_t>(rows, intra_op_threads()))
                          : 1;
  if (threads <= 1) return part(0, rows);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    part(rows * t / threads, rows * (t + 1) / threads);
    fpe::collect_worker_flags();
  }
}

void noop(const Instr&, const Frame&) {}

}  // namespace

bool select_softmax_xent(Instr& instr) {
  const bool grad = instr.op == Op::SoftmaxXentGrad;
  assert(instr.ins.size() == (grad ? 3u : 2u) && instr.ins[1].dtype == DType::i32);
  const Shape& xs = instr.ins[0].shape;
  assert(!xs.empty());
  instr.p[0] = instr.ins[1].size();
  instr.p[1] = xs.back();
  if (instr.out.size() == 0) {
    instr.fn = noop;
    return true;
  }
  switch (instr.out.dtype) {
    case DType::f32: instr.fn = grad ? run<float, true> : run<float, false>; return true;
    case DType::f64: instr.fn = grad ? run<double, true> : run<double, false>; return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
