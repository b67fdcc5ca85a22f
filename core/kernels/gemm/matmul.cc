// MatMul: (batched) GEMM straight into the output buffer, computed the same way whatever the
// intra-op thread count, so a step's results never depend on it (README: reproducibility).
//
// Eigen's own product parallelizes with OpenMP and then picks its blocking for the thread
// count, which moves the depth blocks' boundaries and so the rounding. So nothing here calls
// it. The paths:
//   library  a rank-2 f32/f64 product (also x[..., M, K] @ w[K, N], folded into one GEMM of
//            batch*M rows) deep and large enough goes to BLIS when the build has it
//            (gemm_library.h), which never splits the depth either;
//   packed   an f32 one where BLIS is not used (or FJIT_GEMM=fjit) goes to fjit's packed GEMM
//            on the micro-kernel of the CPU's instruction set (packed_gemm.h), whose threads
//            take whole output tiles, never the depth;
//   blocked  otherwise (f64, FJIT_GEMM=eigen) such a product runs on the GEMM update's driver
//            (gemm_update.cc), whose threads split fixed blocks of output rows, never the depth;
//   vector   one output row (a decode step's x [1, K] @ W): a matrix-vector product that streams
//            op(B) once, where a GEMM would first pack all of B to use it for one row;
//   narrow   N <= kNarrowN columns (below): f32 on the packed GEMM, f64 on Eigen's driver;
//   batched  a batch of f32 products (attention's [B, T, T] @ [B, T, D]) large enough goes to
//            the packed GEMM, one product per entry (packed_sgemm_batched); otherwise (f64,
//            i32, small) one sequential Eigen GEMM per batch entry; threads take whole entries.
// The last two call Eigen's GEMM driver directly with one thread's blocking, which depends on
// the shape only.
// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsics when Eigen's
// GEMM kernels are instantiated here; the warning is about _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "core/base/eigen.h"
#include <algorithm>
#include <cassert>

#include "core/kernels/fused/fused.h"
#include "core/kernels/gemm/gemm_library.h"
#include "core/kernels/gemm/matmul_bf16.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/kernels/gemm/patches_gemm.h"
#include "core/kernels/structural/structural.h"
#include "core/base/fpe_flags.h"
#include "core/base/threads.h"

namespace fjit::kernels::st {
namespace {

using Eigen::Index;
namespace ei = Eigen::internal;

// res (column-major, leading dimension res_stride) = lhs [rows, depth] * rhs [depth, cols] by
// Eigen's GEMM driver on this thread, with the blocking one thread gets for these sizes.
template <class T, int LhsOrder, int RhsOrder>
void sequential_gemm(Index rows, Index cols, Index depth, const T* lhs, Index lhs_stride,
                     const T* rhs, Index rhs_stride, T* res, Index res_stride) {
  for (Index j = 0; j < cols; ++j) std::fill(res + j * res_stride, res + j * res_stride + rows, T(0));
  if (depth == 0) return;
  ei::gemm_blocking_space<Eigen::ColMajor, T, T, Eigen::Dynamic, Eigen::Dynamic, Eigen::Dynamic, 1,
                          false>
      blocking(rows, cols, depth, 1, true);
  ei::general_matrix_matrix_product<Index, T, LhsOrder, false, T, RhsOrder, false, Eigen::ColMajor,
                                    1>::run(rows, cols, depth, lhs, lhs_stride, rhs, rhs_stride,
                                            res, 1, res_stride, T(1), blocking, nullptr);
}

// Row-major c [M, N] = op(A) op(B), computed as the column-major c^T [N, M] = op(B)^T op(A)^T,
// the orientation Eigen takes for a row-major destination.
template <class T, bool TA, bool TB>
void row_major_gemm(Index m, Index k, Index n, const T* a, const T* b, T* c) {
  constexpr int kLhsOrder = TB ? Eigen::RowMajor : Eigen::ColMajor;
  constexpr int kRhsOrder = TA ? Eigen::RowMajor : Eigen::ColMajor;
  sequential_gemm<T, kLhsOrder, kRhsOrder>(n, m, k, b, TB ? k : n, a, TA ? m : k, c, n);
}

// p: [0]=M [1]=K [2]=N [3]=batch [4]=a batch stride [5]=b batch stride (elements; 0 = the
// operand is rank-2 and shared by every batch).
template <class T, bool TA, bool TB>
void batched_kernel(const Instr& in, const Frame& f) {
  const Index m = in.p[0], k = in.p[1], n = in.p[2];
  const int64_t batch = in.p[3], sa = in.p[4], sb = in.p[5];
  const T* a = in.in<T>(f, 0);
  const T* b = in.in<T>(f, 1);
  T* c = in.output<T>(f);
  const int threads = static_cast<int>(std::min<int64_t>(batch, intra_op_threads()));
  // Past the step's deadline the entries left are skipped (core/base/step_deadline.h).
  const int64_t deadline = thread_step_deadline();
  if (threads > 1 && 2 * batch * m * n * k >= (int64_t{1} << 22)) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < batch; ++i) {
      if (!deadline_passed(deadline)) row_major_gemm<T, TA, TB>(m, k, n, a + i * sa, b + i * sb, c + i * m * n);
      fpe::collect_worker_flags();
    }
  } else {
    for (int64_t i = 0; i < batch && !deadline_passed(deadline); ++i)
      row_major_gemm<T, TA, TB>(m, k, n, a + i * sa, b + i * sb, c + i * m * n);
  }
}

// A narrow output (N <= kNarrowN columns, one batch): in the row-major orientation the GEMM's
// row dimension would be N, padded to its register block of 3 vectors (48 floats): 10 logits
// would use a fifth of the FMA units. So the product is computed into a column-major
// temporary on the stack (row dimension M) and transposed into place, a few thousand elements.
constexpr int64_t kNarrowN = 16;
constexpr int64_t kNarrowBytes = 32 << 10;
template <class T, bool TA, bool TB>
void narrow_kernel(const Instr& in, const Frame& f) {
  const Index m = in.p[0], k = in.p[1], n = in.p[2];
  alignas(64) std::byte tmp[kNarrowBytes];
  T* t = reinterpret_cast<T*>(tmp);
  // op(A) [M, K] and op(B) [K, N] from row-major storage.
  sequential_gemm<T, TA ? Eigen::ColMajor : Eigen::RowMajor, TB ? Eigen::ColMajor : Eigen::RowMajor>(
      m, n, k, in.in<T>(f, 0), TA ? m : k, in.in<T>(f, 1), TB ? k : n, t, m);
  using ColMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<RowMajor>(in.output<T>(f), m, n) = Eigen::Map<const ColMajor>(t, m, n);
}

// The f32 narrow product on the packed GEMM (packed_gemm.h), in the same transposed
// orientation: c^T [N, M] = op(B)^T op(A)^T, so that N is the kernel's row dimension (N of its
// MR rows used) and M runs along its vector columns; then transposed into place. p[6] = the Isa.
template <bool TA, bool TB>
void narrow_packed_kernel(const Instr& in, const Frame& f) {
  const int64_t m = in.p[0], k = in.p[1], n = in.p[2];
  alignas(64) float t[kNarrowBytes / sizeof(float)];
  // op(B)^T is B's storage read the other way (transposed unless B is), op(A)^T likewise.
  packed_sgemm(static_cast<Isa>(in.p[6]), !TB, !TA, n, m, k, in.in<float>(f, 1), in.in<float>(f, 0),
               t, false, 1);
  float* out = in.output<float>(f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) out[i * n + j] = t[j * m + i];
}

template <class T>
KernelFn pick_narrow(bool ta, bool tb) {
  if (ta) return tb ? narrow_kernel<T, true, true> : narrow_kernel<T, true, false>;
  return tb ? narrow_kernel<T, false, true> : narrow_kernel<T, false, false>;
}

// The narrow f32 kernel: on the packed GEMM unless FJIT_GEMM=eigen.
bool select_narrow_packed(Instr& instr, bool ta, bool tb) {
  if (instr.out.dtype != DType::f32 || packed_gemm_use() == PackedGemmUse::never) return false;
  instr.p[6] = static_cast<int64_t>(active_isa());
  if (ta)
    instr.fn = tb ? narrow_packed_kernel<true, true> : narrow_packed_kernel<true, false>;
  else
    instr.fn = tb ? narrow_packed_kernel<false, true> : narrow_packed_kernel<false, false>;
  return true;
}

// True when narrow_kernel applies and pays (M large enough for full register blocks).
bool narrow_shape(int64_t m, int64_t k, int64_t n, int64_t batch, int64_t esize) {
  return batch == 1 && n <= kNarrowN && m >= 64 && k >= 16 && m * n * esize <= kNarrowBytes;
}
bool narrow(const Instr& instr, int64_t esize) {
  return narrow_shape(instr.p[0], instr.p[1], instr.p[2], instr.p[3], esize);
}

// One output row, batch 1: y [1, N] = x [1, K] op(B). Eigen's matrix-vector product reads op(B)
// in place (row-major B [K, N] is the column-major N x K matrix B^T; a transposed B [N, K] is
// row-major N x K), on this thread, summing each output in an order fixed by the shape.
template <class T, bool TB>
void vector_kernel(const Instr& in, const Frame& f) {
  const Index k = in.p[1], n = in.p[2];
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using ColMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const Vec> x(in.in<T>(f, 0), k);  // [1, K] or, transposed, [K, 1]: contiguous
  Eigen::Map<Vec> y(in.output<T>(f), n);
  if constexpr (TB) y.noalias() = Eigen::Map<const RowMajor>(in.in<T>(f, 1), n, k) * x;
  else y.noalias() = Eigen::Map<const ColMajor>(in.in<T>(f, 1), n, k) * x;
}

// An empty output: nothing to compute.
void noop_kernel(const Instr&, const Frame&) {}

template <class T>
KernelFn pick(bool ta, bool tb) {
  if (ta) return tb ? batched_kernel<T, true, true> : batched_kernel<T, true, false>;
  return tb ? batched_kernel<T, false, true> : batched_kernel<T, false, false>;
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
  // Operand 0 an image whose patches are op(A) (patches_gemm.h): the packed GEMM alone.
  if (!instr.attrs.window.empty()) {
    if (instr.out.size() == 0) {
      instr.fn = noop_kernel;
      return true;
    }
    return select_patches_matmul(instr);
  }
  plan_gemm(instr);
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  if (instr.out.size() == 0) {
    instr.fn = noop_kernel;
    return true;
  }
  if (instr.ins[0].dtype == DType::bf16) return select_bf16_matmul(instr);  // matmul_bf16.h
  const DType t = instr.out.dtype;
  const int64_t esize = static_cast<int64_t>(dtype_size(t));
  if ((t == DType::f32 || t == DType::f64) && narrow(instr, esize)) {
    if (select_narrow_packed(instr, ta, tb)) return true;
    instr.fn = t == DType::f32 ? pick_narrow<float>(ta, tb) : pick_narrow<double>(ta, tb);
    return true;
  }
  if ((t == DType::f32 || t == DType::f64) && instr.p[3] == 1 && instr.p[0] == 1) {
    if (t == DType::f32) instr.fn = tb ? vector_kernel<float, true> : vector_kernel<float, false>;
    else instr.fn = tb ? vector_kernel<double, true> : vector_kernel<double, false>;
    return true;
  }
  if (instr.p[3] == 1) {
    const int64_t m = instr.p[0], k = instr.p[1], n = instr.p[2];
    if (packed_gemm_use() == PackedGemmUse::always && select_packed_matmul(instr, m, k, n)) return true;
    if (select_library_matmul(instr, m, k, n)) return true;
    if (select_packed_matmul(instr, m, k, n)) return true;
    if (select_blocked_matmul(instr, m, k, n)) return true;
  } else if (select_packed_batched_matmul(instr)) {
    return true;
  }
  switch (t) {
    case DType::f32: instr.fn = pick<float>(ta, tb); return true;
    case DType::f64: instr.fn = pick<double>(ta, tb); return true;
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
