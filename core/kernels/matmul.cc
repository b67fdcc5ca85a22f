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
bool narrow_shape(int64_t m, int64_t k, int64_t n, int64_t batch, int64_t esize) {
  return batch == 1 && n <= kNarrowN && m >= 64 && k >= 16 && m * n * esize <= kNarrowBytes;
}
bool narrow(const Instr& instr, int64_t esize) {
  return narrow_shape(instr.p[0], instr.p[1], instr.p[2], instr.p[3], esize);
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
    default: return false;
  }
}

}  // namespace fjit::kernels::st

namespace fjit {

bool matmul_is_narrow(int64_t m, int64_t k, int64_t n, int64_t esize) {
  return kernels::st::narrow_shape(m, k, n, 1, esize);
}

}  // namespace fjit
