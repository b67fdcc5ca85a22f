// Fused attention on bf16 q, k and v (the mixed-precision policy, core/nn/precision.h): the
// blocked algorithm of attention.cc with every block product on bf16 operands and f32
// accumulation (core/kernels/gemm/bf16_gemm.h), and everything else in f32: the scores after
// the product, the running maximum and sum, the probabilities, the output accumulator, the
// log-sum-exp, D = rowsum(dO * out), dS, and the gradients' sums.
//
// What is rounded to bf16, once, where it is made: the probabilities P before P V and P^T dO,
// the output's cotangent dO before dO V^T and P^T dO, and dS before dS K and dS^T Q. The row
// sum l of the forward is the sum of the f32 probabilities, and dS = P (dP - D) * scale takes the
// f32 P.
//
// Products: with AVX512_BF16 (active_avx512_bf16()), op(B) is packed once per block for the
// bf16 tiles; elsewhere both operands are widened to f32 (exact) and multiplied on the packed
// f32 GEMM: exact products, f32 sums. The two paths agree to f32 accumulation error, as
// bf16_gemm.h's do. Tasks are attention.cc's, and every sum runs in a fixed order of blocks, so
// no bit depends on the intra-op thread count.
#include "core/base/eigen.h"
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/base/fpe_flags.h"
#include "core/base/isa.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"
#include "core/kernels/elementwise/cast_bf16.h"
#include "core/kernels/gemm/bf16_gemm.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/kernels/structural/attention_geometry.h"

namespace fjit::kernels::st {
namespace {

constexpr int64_t kBq = 60, kBk = 64;  // kBq: whole 12-row micro-tiles

float widen(uint16_t x) {
  const uint32_t bits = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, as a cast to bf16 rounds (a NaN to the quiet NaN of its sign).
uint16_t round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return ew::round_f32_to_bf16(u);
}

// o[i] = x[i] rounded to bf16 for i < n (cast_bf16.h: every variant gives the same bits).
void round_row(const float* x, uint16_t* o, int64_t n) {
  const auto* u = reinterpret_cast<const uint32_t*>(x);
  if (active_avx512_bf16()) ew::round_f32_to_bf16_avx512(u, o, n);
  else ew::round_f32_to_bf16_portable(u, o, n);
}

using Row = Eigen::Map<Eigen::ArrayXf>;

// op(B) [k, n] made ready for products op(A) op(B): packed for the bf16 tiles, or widened to a
// row-major f32 [k, n] for the packed f32 GEMM. B is row-major [k, n] with row stride ldb, or
// with trans_b stored [n, k] with row stride ldb.
class BlockOperand {
 public:
  void set(int64_t n, int64_t k, const uint16_t* b, int64_t ldb, bool trans_b) {
    n_ = n;
    k_ = k;
    native_ = active_avx512_bf16();
    if (native_) {
      bp_ = aligned_scratch(packed_, bf16_packed_b_size(n, k));
      bf16_pack_b(n, k, b, ldb, trans_b, bp_);
      return;
    }
    grow_scratch(wide_, n * k);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t c = 0; c < n; ++c) wide_[p * n + c] = widen(trans_b ? b[c * ldb + p] : b[p * ldb + c]);
  }
  // c [m, n] (row stride n) = (accumulate ? c : 0) + op(A) op(B): op(A) [m, k] from A row-major
  // with row stride lda, or with trans_a A stored [k, m] with row stride lda.
  void multiply(int64_t m, const uint16_t* a, int64_t lda, bool trans_a, float* c, bool accumulate) {
    if (m <= 0 || n_ <= 0) return;
    if (k_ <= 0) {
      if (!accumulate) std::fill(c, c + m * n_, 0.f);
      return;
    }
    if (native_) {
      bf16_gemm_packed_b(m, n_, k_, a, lda, trans_a, bp_, c, accumulate);
      return;
    }
    const int64_t ra = trans_a ? k_ : m, ca = trans_a ? m : k_;
    grow_scratch(a_wide_, m * k_);
    for (int64_t r = 0; r < ra; ++r)
      for (int64_t col = 0; col < ca; ++col) a_wide_[r * ca + col] = widen(a[r * lda + col]);
    packed_sgemm_strided(active_isa(), trans_a, false, m, n_, k_, a_wide_.data(), ca, wide_.data(), n_, c,
                         n_, accumulate, 1);
  }

 private:
  bool native_ = false;
  int64_t n_ = 0, k_ = 0;
  std::vector<uint16_t> packed_;
  uint16_t* bp_ = nullptr;
  std::vector<float> wide_, a_wide_;
};

// The scratch of one task, kept per thread between tasks.
struct Scratch {
  BlockOperand b1, b2, b3;
  // The backward's dO and Q blocks as op(B) of dV += P^T dO and dK += dS^T Q, per query block:
  // packed once per (batch, head), not once per key block.
  std::vector<BlockOperand> dout_blocks, q_blocks;
  // The forward's K^T and V key blocks as op(B) of S = Q K^T and P V, kept from one task to
  // the next of the same (batch, head) of the same call, and packed again only when a query
  // block needs a key block with another number of keys (the causal diagonal's).
  std::vector<BlockOperand> key_blocks, value_blocks;
  std::vector<int64_t> key_cols;  // per key block: the keys packed (0: none)
  uint64_t forward_call = 0;
  int64_t forward_bh = -1;
  std::vector<float> tmp;
  std::vector<uint16_t> dout16;
  alignas(64) float s[kBq * kBk];
  alignas(64) float dp[kBq * kBk];
  alignas(64) uint16_t p16[kBq * kBk];
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Numbers the kernel's calls, so that a thread's key blocks are never taken for another
// call's (whose operands may lie at the same addresses).
std::atomic<uint64_t> forward_calls{0};

void forward_task(const Instr& in, const Frame& f, const AttentionGeometry& g, int64_t task, uint64_t call) {
  const auto [q, k, v, out, bh, b, i0, rows, length] = g.forward_task<uint16_t, float>(in, f, task, kBq);
  const int64_t pw = g.dv + 1;
  Scratch& sc = scratch();
  if (sc.forward_call != call || sc.forward_bh != bh) {
    const int64_t key_blocks = (g.tk + kBk - 1) / kBk;
    if (static_cast<int64_t>(sc.key_blocks.size()) < key_blocks) {
      sc.key_blocks.resize(key_blocks);
      sc.value_blocks.resize(key_blocks);
    }
    sc.key_cols.assign(key_blocks, 0);
    sc.forward_call = call;
    sc.forward_bh = bh;
  }
  sc.tmp.resize(kBq * g.dv);
  float m[kBq], l[kBq];
  int64_t lens[kBq];
  int64_t max_len = 0;
  for (int64_t r = 0; r < rows; ++r) {
    lens[r] = g.row_length(length, i0 + r);
    max_len = std::max(max_len, lens[r]);
    m[r] = -std::numeric_limits<float>::infinity();
    l[r] = 0;
    std::fill_n(out + r * pw, g.dv, 0.f);
  }
  const float scale = static_cast<float>(in.attrs.scalar);
  for (int64_t j0 = 0; j0 < max_len; j0 += kBk) {
    const int64_t cols = std::min(kBk, max_len - j0);
    const int64_t jb = j0 / kBk;
    if (sc.key_cols[jb] != cols) {
      sc.key_blocks[jb].set(cols, g.dh, k + j0 * g.dh, g.dh, true);
      sc.value_blocks[jb].set(g.dv, cols, v + j0 * g.dv, g.dv, false);
      sc.key_cols[jb] = cols;
    }
    sc.key_blocks[jb].multiply(rows, q, g.dh, false, sc.s, false);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = sc.s + r * cols;
      uint16_t* p16 = sc.p16 + r * cols;
      const int64_t valid = std::clamp<int64_t>(lens[r] - j0, 0, cols);
      std::fill(p16 + valid, p16 + cols, uint16_t{0});
      if (valid == 0) continue;
      Row p(row, valid);
      p *= scale;
      const float mx = std::max(m[r], p.maxCoeff());
      p = (p - mx).exp();
      round_row(row, p16, valid);
      const float alpha = std::exp(m[r] - mx);  // 0 on the first block the row sees
      l[r] = l[r] * alpha + p.sum();
      m[r] = mx;
      if (alpha != 1.f) Row(out + r * pw, g.dv) *= alpha;
    }
    sc.value_blocks[jb].multiply(rows, sc.p16, cols, false, sc.tmp.data(), false);
    for (int64_t r = 0; r < rows; ++r) Row(out + r * pw, g.dv) += Row(sc.tmp.data() + r * g.dv, g.dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * pw;
    if (lens[r] <= 0) {
      o[g.dv] = -std::numeric_limits<float>::infinity();
      continue;
    }
    Row(o, g.dv) *= 1.f / l[r];
    o[g.dv] = m[r] + std::log(l[r]);
  }
}

void backward_task(const Instr& in, const Frame& f, const AttentionGeometry& g, int64_t bh, int64_t deadline) {
  const auto [q, k, v, out, dout, dq, dk, dv, b, length, max_len] = g.backward_task<uint16_t, float>(in, f, bh);
  const int64_t pw = g.dv + 1;
  const float scale = static_cast<float>(in.attrs.scalar);
  Scratch& sc = scratch();
  // dO rounded once, [Tq, dv] without the log-sum-exp column; D per row in f32 from the f32 dO.
  sc.dout16.resize(g.tq * g.dv);
  sc.tmp.resize(g.tq);
  for (int64_t i = 0; i < g.tq; ++i) {
    const float* d = dout + i * pw;
    const float* o = out + i * pw;
    float dr = 0;
    for (int64_t c = 0; c < g.dv; ++c) {
      sc.dout16[i * g.dv + c] = round_bf16(d[c]);
      dr += d[c] * o[c];
    }
    sc.tmp[i] = dr - d[g.dv];
  }
  const uint16_t* do16 = sc.dout16.data();
  const int64_t query_blocks = (g.tq + kBq - 1) / kBq;
  if (static_cast<int64_t>(sc.q_blocks.size()) < query_blocks) {
    sc.dout_blocks.resize(query_blocks);
    sc.q_blocks.resize(query_blocks);
  }
  for (int64_t i0 = 0; i0 < g.tq; i0 += kBq) {
    const int64_t rows = std::min(kBq, g.tq - i0);
    sc.dout_blocks[i0 / kBq].set(g.dv, rows, do16 + i0 * g.dv, g.dv, false);
    sc.q_blocks[i0 / kBq].set(g.dh, rows, q + i0 * g.dh, g.dh, false);
  }
  for (int64_t j0 = 0; j0 < max_len; j0 += kBk) {
    if (deadline_passed(deadline)) [[unlikely]] return;  // the key blocks left are skipped
    const int64_t cols = std::min(kBk, max_len - j0);
    sc.b1.set(cols, g.dh, k + j0 * g.dh, g.dh, true);   // S = Q K^T
    sc.b2.set(cols, g.dv, v + j0 * g.dv, g.dv, true);   // dP = dO V^T
    sc.b3.set(g.dh, cols, k + j0 * g.dh, g.dh, false);  // dQ += dS K
    // The first query row that sees key j0: rows before it see none of this block.
    const int64_t first = g.causal ? std::max<int64_t>(0, j0 - (g.tk - g.tq)) : 0;
    for (int64_t i0 = first / kBq * kBq; i0 < g.tq; i0 += kBq) {
      const int64_t rows = std::min(kBq, g.tq - i0);
      sc.b1.multiply(rows, q + i0 * g.dh, g.dh, false, sc.s, false);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = sc.s + r * cols;
        uint16_t* p16 = sc.p16 + r * cols;
        const int64_t valid = std::clamp<int64_t>(g.row_length(length, i0 + r) - j0, 0, cols);
        const float lse = out[(i0 + r) * pw + g.dv];
        Row p(row, valid);
        p = (p * scale - lse).exp();
        round_row(row, p16, valid);
        std::fill(row + valid, row + cols, 0.f);
        std::fill(p16 + valid, p16 + cols, uint16_t{0});
      }
      sc.dout_blocks[i0 / kBq].multiply(cols, sc.p16, cols, true, dv + j0 * g.dv, true);  // dV += P^T dO
      sc.b2.multiply(rows, do16 + i0 * g.dv, g.dv, false, sc.dp, false);
      for (int64_t r = 0; r < rows; ++r) {
        Row dpr(sc.dp + r * cols, cols);
        dpr = Row(sc.s + r * cols, cols) * (dpr - sc.tmp[i0 + r]) * scale;
        round_row(sc.dp + r * cols, sc.p16 + r * cols, cols);  // P's bf16 copy is used up: dS
      }
      sc.b3.multiply(rows, sc.p16, cols, false, dq + i0 * g.dh, true);
      sc.q_blocks[i0 / kBq].multiply(cols, sc.p16, cols, true, dk + j0 * g.dh, true);  // dK += dS^T Q
    }
  }
}

}  // namespace

void attention_bf16_kernel(const Instr& in, const Frame& f) {
  const AttentionGeometry g(in);
  const uint64_t call = in.op == Op::Attention ? ++forward_calls : 0;
  run_attention_tasks(
      in, g, kBq, [&](int64_t t) { forward_task(in, f, g, t, call); },
      [&](int64_t bh, int64_t deadline) { backward_task(in, f, g, bh, deadline); });
}

}  // namespace fjit::kernels::st
