// MatMul: (batched) GEMM straight into the output buffer through row-major Eigen Maps.
//
// trans_a / trans_b are expressed as .transpose() on the Maps, which Eigen's GEMM folds into
// its packing (no copy). The per-call cost over a hand-written `C.noalias() = A * B` is
// building three Maps. A batched operand against a shared rank-2 B (x[..., M, K] @ w[K, N],
// the common "dense layer over a sequence" case) is folded into one GEMM of (batch*M) rows.
// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsics when Eigen's
// GEMM kernels are instantiated here; the warning is about _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "core/kernels/fused.h"
#include "core/kernels/structural.h"

namespace fjit::kernels::st {
namespace {

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A stored row-major [rows, cols] block viewed as op(X): [cols, rows] when Trans.
template <class T, bool Trans>
auto operand(const T* p, Eigen::Index rows, Eigen::Index cols) {
  if constexpr (Trans) return Eigen::Map<const RowMajor<T>>(p, cols, rows).transpose();
  else return Eigen::Map<const RowMajor<T>>(p, rows, cols);
}

// p: [0]=M [1]=K [2]=N [3]=batch [4]=a batch stride [5]=b batch stride (elements; 0 = the
// operand is rank-2 and shared by every batch).
template <class T, bool TA, bool TB>
void matmul_kernel(const Instr& in, const Frame& f) {
  const Eigen::Index m = in.p[0], k = in.p[1], n = in.p[2];
  const int64_t batch = in.p[3], sa = in.p[4], sb = in.p[5];
  const T* a = in.in<T>(f, 0);
  const T* b = in.in<T>(f, 1);
  T* c = in.output<T>(f);
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::Map<RowMajor<T>> out(c + i * m * n, m, n);
    out.noalias() = operand<T, TA>(a + i * sa, m, k) * operand<T, TB>(b + i * sb, k, n);
  }
}

// A narrow output (N <= kNarrowN columns, one batch): Eigen computes a row-major product as
// the column-major product of the transposes, whose row dimension is then N, padded to its
// register block of 3 vectors (48 floats): 10 logits use a fifth of the FMA units. So the
// product is computed into a column-major temporary on the stack (row dimension M) and
// transposed into place, a few thousand elements.
constexpr int64_t kNarrowN = 16;
constexpr int64_t kNarrowBytes = 32 << 10;
template <class T, bool TA, bool TB>
void narrow_kernel(const Instr& in, const Frame& f) {
  const Eigen::Index m = in.p[0], k = in.p[1], n = in.p[2];
  alignas(64) std::byte tmp[kNarrowBytes];
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>> t(reinterpret_cast<T*>(tmp), m, n);
  t.noalias() = operand<T, TA>(in.in<T>(f, 0), m, k) * operand<T, TB>(in.in<T>(f, 1), k, n);
  Eigen::Map<RowMajor<T>>(in.output<T>(f), m, n) = t;
}

template <class T>
KernelFn pick_narrow(bool ta, bool tb) {
  if (ta) return tb ? narrow_kernel<T, true, true> : narrow_kernel<T, true, false>;
  return tb ? narrow_kernel<T, false, true> : narrow_kernel<T, false, false>;
}

// True when narrow_kernel applies and pays (M large enough for full register blocks).
bool narrow(const Instr& instr, int64_t esize) {
  const int64_t m = instr.p[0], k = instr.p[1], n = instr.p[2];
  return instr.p[3] == 1 && n <= kNarrowN && m >= 64 && k >= 16 && m * n * esize <= kNarrowBytes;
}

// GEMM epilogue (fused.h): out = addend + alpha * op(A) op(B), accumulated by the GEMM itself.
// p[0..5] as above; p[6]: 0 no addend, 1 addend of the output's shape, 2 a row vector [N]
// broadcast over the rows, 3 a scalar.
template <class T, bool TA, bool TB>
void epilogue_kernel(const Instr& in, const Frame& f) {
  const Eigen::Index m = in.p[0], k = in.p[1], n = in.p[2];
  const int64_t batch = in.p[3], sa = in.p[4], sb = in.p[5];
  const T alpha = static_cast<T>(in.attrs.scalar);
  const T* a = in.in<T>(f, 0);
  const T* b = in.in<T>(f, 1);
  T* c = in.output<T>(f);
  const int64_t total = batch * m * n;
  switch (in.p[6]) {
    case 0: std::fill(c, c + total, T(0)); break;
    case 1:
      if (in.in<T>(f, 2) != c) std::memcpy(c, in.in<T>(f, 2), total * sizeof(T));
      break;
    case 2:
      for (int64_t r = 0; r < batch * m; ++r) std::memcpy(c + r * n, in.in<T>(f, 2), n * sizeof(T));
      break;
    case 3: std::fill(c, c + total, *in.in<T>(f, 2)); break;
  }
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::Map<RowMajor<T>> out(c + i * m * n, m, n);
    out.noalias() += alpha * (operand<T, TA>(a + i * sa, m, k) * operand<T, TB>(b + i * sb, k, n));
  }
}

// The update an epilogue computes, out = addend + alpha * x, for an x already materialized:
// std::fma, the single rounding of the GEMM's own store (pmadd(acc, alpha, out)), so that an
// update whose product a check also reads is bit-identical to the epilogue without the check.
// ins = {x} or {x, addend}; p[2] = N (row length), p[6] as in epilogue_kernel. Elements
// [lo, hi) of the flat output.
template <class T>
void update_range(const Instr& in, const Frame& f, int64_t lo, int64_t hi) {
  const T alpha = static_cast<T>(in.attrs.scalar);
  const T* x = in.in<T>(f, 0);
  T* out = in.output<T>(f);
  switch (in.p[6]) {
    case 0:
      for (int64_t i = lo; i < hi; ++i) out[i] = std::fma(alpha, x[i], T(0));
      break;
    case 1: {
      const T* d = in.in<T>(f, 1);
      for (int64_t i = lo; i < hi; ++i) out[i] = std::fma(alpha, x[i], d[i]);
      break;
    }
    case 2: {
      const T* d = in.in<T>(f, 1);
      const int64_t n = in.p[2];
      for (int64_t i = lo, j = lo % n; i < hi; ++i, j = j + 1 == n ? 0 : j + 1)
        out[i] = std::fma(alpha, x[i], d[j]);
      break;
    }
    case 3: {
      const T d = *in.in<T>(f, 1);
      for (int64_t i = lo; i < hi; ++i) out[i] = std::fma(alpha, x[i], d);
      break;
    }
  }
}

template <class T>
void update_kernel(const Instr& in, const Frame& f) {
  update_range<T>(in, f, 0, in.out.size());
}

// With the sum of x's squares as a second result (in_bufs.back()): the squares are summed in
// the tree of the unfused full sum (reduce.cc's blocked_sum: leaves of 2048, Eigen's redux of
// an aligned leaf, pairwise above), so the sum is bit-identical to sum(x * x) computed apart.
constexpr int64_t kSquareLeaf = 2048;
template <class T>
T update_and_square_sum(const Instr& in, const Frame& f, T* leaf, int64_t lo, int64_t n) {
  if (n <= kSquareLeaf) {
    update_range<T>(in, f, lo, lo + n);
    const T* x = in.in<T>(f, 0) + lo;
    for (int64_t i = 0; i < n; ++i) leaf[i] = x[i] * x[i];
    return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(leaf, n).sum();
  }
  const int64_t half = ((n / kSquareLeaf + 1) / 2) * kSquareLeaf;
  return update_and_square_sum<T>(in, f, leaf, lo, half) +
         update_and_square_sum<T>(in, f, leaf, lo + half, n - half);
}

template <class T>
void update_sum_kernel(const Instr& in, const Frame& f) {
  alignas(64) T leaf[kSquareLeaf];
  *static_cast<T*>(f.bufs[in.in_bufs.back()]) =
      update_and_square_sum<T>(in, f, leaf, 0, in.out.size());
}

// True when Eigen's GEMM stores addend + alpha * acc with one rounding, acc being exactly what
// the plain product `=` stores, so that epilogue_kernel and update_kernel agree bit for bit:
//   - a GEMM, not Eigen's coefficient-based product (small sizes) nor a GEMV (one row/column),
//     which scale and round otherwise;
//   - the whole depth in one kc block: with several, the epilogue adds alpha * (partial sum)
//     to the output once per block, while the plain product sums the blocks unscaled;
//   - Eigen's rows (our N: the row-major product is computed transposed) a multiple of the
//     packet, so no row goes through the scalar tail, whose store the compiler may or may not
//     contract into an fma;
//   - pmadd being an fma.
// The blocking depends on the thread count, so every count Eigen might use is tried.
template <class T>
bool epilogue_rounds_once(const Instr& instr) {
#ifndef EIGEN_VECTORIZE_FMA
  (void)instr;
  return false;
#else
  const Eigen::Index m = instr.p[0], k = instr.p[1], n = instr.p[2];
  if (m < 2 || n < 2 || m + n + k < EIGEN_GEMM_TO_COEFFBASED_THRESHOLD) return false;
  if (n % Eigen::internal::packet_traits<T>::size != 0) return false;
  for (Eigen::Index threads = 1; threads <= 64; ++threads) {
    Eigen::Index kc = k, mc = n, nc = m;
    Eigen::internal::computeProductBlockingSizes<T, T, 1>(kc, mc, nc, threads);
    if (kc != k) return false;
  }
  return true;
#endif
}

template <class T>
KernelFn pick_epilogue(bool ta, bool tb) {
  if (ta) return tb ? epilogue_kernel<T, true, true> : epilogue_kernel<T, true, false>;
  return tb ? epilogue_kernel<T, false, true> : epilogue_kernel<T, false, false>;
}

// An empty output: nothing to compute.
void noop_kernel(const Instr&, const Frame&) {}

template <class T>
KernelFn pick(bool ta, bool tb) {
  if (ta) return tb ? matmul_kernel<T, true, true> : matmul_kernel<T, true, false>;
  return tb ? matmul_kernel<T, false, true> : matmul_kernel<T, false, false>;
}

// Fills p[0..5] (see matmul_kernel).
void plan_gemm(Instr& instr) {
  const Shape& as = instr.ins[0].shape;
  const Shape& bs = instr.ins[1].shape;
  const Shape& cs = instr.out.shape;
  assert(as.size() >= 2 && bs.size() >= 2 && cs.size() >= 2);
  const bool ta = instr.attrs.trans_a;
  [[maybe_unused]] const bool tb = instr.attrs.trans_b;
  const int64_t m = cs[cs.size() - 2], n = cs.back();
  const int64_t k = ta ? as[as.size() - 2] : as.back();
  assert((tb ? bs.back() : bs[bs.size() - 2]) == k);
  assert((ta ? as.back() : as[as.size() - 2]) == m && (tb ? bs[bs.size() - 2] : bs.back()) == n);
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < cs.size(); ++d) batch *= cs[d];
  int64_t sa = as.size() > 2 ? m * k : 0;
  int64_t sb = bs.size() > 2 ? k * n : 0;
  assert(as.size() == 2 || as.size() == cs.size());
  assert(bs.size() == 2 || bs.size() == cs.size());
  int64_t rows = m;
  if (sb == 0 && sa != 0 && !ta) {  // [batch*M, K] x [K, N]: one GEMM
    rows = m * batch;
    batch = 1;
  }
  instr.p[0] = rows;
  instr.p[1] = k;
  instr.p[2] = n;
  instr.p[3] = batch;
  instr.p[4] = sa;
  instr.p[5] = sb;
}

}  // namespace

bool select_matmul(Instr& instr) {
  assert(instr.op == Op::MatMul && instr.ins.size() == 2);
  plan_gemm(instr);
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  if (instr.out.size() == 0) {
    instr.fn = noop_kernel;
    return true;
  }
  switch (instr.out.dtype) {
    case DType::f32: instr.fn = narrow(instr, 4) ? pick_narrow<float>(ta, tb) : pick<float>(ta, tb); return true;
    case DType::f64: instr.fn = narrow(instr, 8) ? pick_narrow<double>(ta, tb) : pick<double>(ta, tb); return true;
    case DType::i32: instr.fn = pick<int32_t>(ta, tb); return true;
    case DType::boolean: return false;
  }
  return false;
}

}  // namespace fjit::kernels::st

namespace fjit {

bool select_gemm_epilogue(Instr& instr) {
  using namespace kernels::st;
  instr.fn = nullptr;
  if (instr.ins.size() != 2 && instr.ins.size() != 3) return false;
  const DType t = instr.out.dtype;
  if (t != DType::f32 && t != DType::f64) return false;
  for (const ValueType& v : instr.ins)
    if (v.dtype != t) return false;
  if (instr.out.size() == 0 || instr.ins[0].size() == 0 || instr.ins[1].size() == 0) return false;
  plan_gemm(instr);
  // Narrow outputs run faster through narrow_kernel, unfused.
  if (narrow(instr, dtype_size(t))) return false;
  instr.p[6] = 0;
  if (instr.ins.size() == 3) {
    const Shape& d = instr.ins[2].shape;
    const Shape& c = instr.out.shape;
    if (d == c) instr.p[6] = 1;
    else if (instr.ins[2].size() == 1) instr.p[6] = 3;
    else if (instr.ins[2].size() == c.back() && d.back() == c.back()) instr.p[6] = 2;
    else return false;
  }
  if (!(t == DType::f32 ? epilogue_rounds_once<float>(instr) : epilogue_rounds_once<double>(instr)))
    return false;
  instr.fn = t == DType::f32 ? pick_epilogue<float>(instr.attrs.trans_a, instr.attrs.trans_b)
                             : pick_epilogue<double>(instr.attrs.trans_a, instr.attrs.trans_b);
  return true;
}

bool select_epilogue_update(Instr& instr, bool with_sum_of_squares) {
  using namespace kernels::st;
  instr.fn = nullptr;
  if (instr.ins.size() != 1 && instr.ins.size() != 2) return false;
  const DType t = instr.out.dtype;
  if ((t != DType::f32 && t != DType::f64) || instr.out.shape.size() < 2) return false;
  for (const ValueType& v : instr.ins)
    if (v.dtype != t) return false;
  if (instr.ins[0].shape != instr.out.shape || instr.out.size() == 0) return false;
  instr.p[2] = instr.out.shape.back();
  instr.p[6] = 0;
  if (instr.ins.size() == 2) {
    const Shape& d = instr.ins[1].shape;
    if (d == instr.out.shape)
      instr.p[6] = 1;
    else if (instr.ins[1].size() == 1)
      instr.p[6] = 3;
    else if (instr.ins[1].size() == instr.p[2] && d.back() == instr.p[2])
      instr.p[6] = 2;
    else
      return false;
  }
  if (with_sum_of_squares)
    instr.fn = t == DType::f32 ? update_sum_kernel<float> : update_sum_kernel<double>;
  else
    instr.fn = t == DType::f32 ? update_kernel<float> : update_kernel<double>;
  return true;
}

}  // namespace fjit
