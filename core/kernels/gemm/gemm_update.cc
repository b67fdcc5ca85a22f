// The blocked GEMM update (fused.h, select_gemm_update): out = addend + alpha * op(A) op(B),
// optionally also writing the product and the sum of its squares. f32 products large enough
// run on the packed GEMM instead (packed_update.h); this file's Eigen-based driver takes f64,
// small products and FJIT_GEMM=eigen.
//
// Eigen's own GEMM is driven piece by piece with its internal packing routines and panel
// kernel (gemm_pack_lhs, gemm_pack_rhs, gebp_kernel, Eigen 3.4), which is what its
// general_matrix_matrix_product does, a block of output rows at a time. Two paths:
//   epilogue  the depth fits one kc block (a weight gradient's depth is the batch): the panel
//             kernel stores each finished register tile through gemm_epilogue.h's mapper,
//             which applies the update there, and writes the product or sums its squares only
//             if asked. A gradient norm then costs an fma per stored packet, not a pass.
//   scratch   a deeper product is accumulated over kc blocks into a small scratch block that
//             stays in L1/L2, and the update (and the squares, leaf by leaf as reduce.cc
//             sums) are applied to that block while it is still there.
//
// Rounding: every element of the product is Eigen's panel-kernel accumulation over the depth
// (one sum per kc block, added in order), then out = fma(alpha, product, addend): one
// rounding, the one a GEMM that accumulates alpha * A B into the addend makes. The parameters
// come from the same arithmetic whichever further results are asked for, and do not depend on
// the thread count (threads split output rows, never the depth), so a step computes the same
// parameters with checks off, on user checks, or on every check. The path, and so the order in
// which a sum of squares is added, depends on the shapes only.
//
// Orientation: the row-major product C [M, N] is computed as the column-major C^T [N, M] =
// op(B)^T op(A)^T, as Eigen does for a row-major destination. A block of C's rows is then a
// block of C^T's columns: contiguous, B rows * N elements.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // see matmul.cc
#include "core/base/eigen.h"
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/kernels/gemm/affine_update.h"
#include "core/kernels/fused/fused.h"
#include "core/kernels/gemm/gemm_epilogue.h"
#include "core/base/fpe_flags.h"
#include "core/base/step_deadline.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "core/kernels/gemm/packed_update.h"
#include "core/base/threads.h"

namespace fjit {
namespace {

using Eigen::Index;
namespace ei = Eigen::internal;

// The unfused full sum's leaf (reduce.cc's blocked_sum): sums of squares are taken over
// leaves of this many elements and combined pairwise above them.
constexpr int64_t kLeaf = 2048;
// The scratch block of product rows aims at this many bytes: it must stay in L2 next to the
// packed operands while its update runs.
constexpr int64_t kScratchBytes = 64 << 10;

// p[0] = M, p[1] = K, p[2] = N; p[3] = rows per block; p[4] = kc, p[5] = mc (Eigen's
// blocking); p[6] = AddendForm (affine_update.h);
// p[7] = results and paths (packed_update.h's flags).
using namespace gemm_update;

template <class T>
struct Scratch {  // per thread, grown once: the hot path allocates nothing after warm-up
  std::vector<T, Eigen::aligned_allocator<T>> lhs, rhs, block, leaves;
  std::vector<double> block_squares;
  static Scratch& get() {
    thread_local Scratch s;
    return s;
  }
};
template <class T>
T* sized(std::vector<T, Eigen::aligned_allocator<T>>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// One leaf's sum of squares, bit-identical to reduce.cc's sum over a leaf of materialized
// squares: Eigen reduces an expression without a data pointer from its first element, as it
// reduces an aligned leaf, so the packets are added in the same order; and this file is
// compiled without floating-point contraction (CMakeLists.txt), so each square is rounded
// before it is added, as a materialized square is.
template <class T>
T leaf_sum_of_squares(const T* x, int64_t n) {
  return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(x, n).square().sum();
}

// reduce.cc's tree over the leaf sums of [lo, lo + n).
template <class T>
T combine_leaves(const T* leaves, int64_t lo, int64_t n) {
  if (n <= kLeaf) return leaves[lo / kLeaf];
  const int64_t half = ((n / kLeaf + 1) / 2) * kLeaf;
  return combine_leaves(leaves, lo, half) + combine_leaves(leaves, lo + half, n - half);
}

template <class T, bool TA, bool TB>
struct GemmUpdate {
  using Traits = ei::gebp_traits<T, T>;
  // op(B)^T: [N, K]; op(A)^T: [K, M] (see the orientation note above).
  static constexpr int kLhsOrder = TB ? Eigen::RowMajor : Eigen::ColMajor;
  static constexpr int kRhsOrder = TA ? Eigen::RowMajor : Eigen::ColMajor;
  using LhsMapper = ei::const_blas_data_mapper<T, Index, kLhsOrder>;
  using RhsMapper = ei::const_blas_data_mapper<T, Index, kRhsOrder>;
  using ResMapper = ei::blas_data_mapper<T, Index, Eigen::ColMajor, Eigen::Unaligned, 1>;

  static void run(const Instr& in, const Frame& f) {
    const int64_t m = in.p[0], k = in.p[1], n = in.p[2], rows = in.p[3], kc = in.p[4], mc = in.p[5];
    const T* a = in.in<T>(f, 0);
    const T* b = in.in<T>(f, 1);
    const size_t nin = in.ins.size();
    const T alpha = (in.p[7] & kUnitAlpha)      ? T(1)
                    : (in.p[7] & kAlphaOperand) ? *in.in<T>(f, static_cast<int>(nin) - 1)
                                                : static_cast<T>(in.attrs.scalar);
    T* product = (in.p[7] & kWithProduct) ? static_cast<T*>(f.bufs[in.in_bufs[nin]]) : nullptr;
    T* sum = (in.p[7] & kWithSum)
                 ? static_cast<T*>(f.bufs[in.in_bufs[nin + ((in.p[7] & kWithProduct) ? 1 : 0)]])
                 : nullptr;
    const LhsMapper lhs(b, TB ? k : n);
    const RhsMapper rhs(a, TA ? m : k);

    // op(B)^T packed once, chunk (i2, k2) at lhs + i2 * K + k2 * actual_mc.
    Scratch<T>& main = Scratch<T>::get();
    T* packed_lhs = sized(main.lhs, n * k + 64);
    ei::gemm_pack_lhs<T, Index, LhsMapper, Traits::mr, Traits::LhsProgress,
                      typename Traits::LhsPacket4Packing, kLhsOrder>
        pack_lhs;
    for (int64_t i2 = 0; i2 < n; i2 += mc) {
      const int64_t amc = std::min(mc, n - i2);
      for (int64_t k2 = 0; k2 < k; k2 += kc)
        pack_lhs(packed_lhs + i2 * k + k2 * amc, lhs.getSubMapper(i2, k2), std::min(kc, k - k2), amc);
    }
    const int64_t total = m * n;
    const int64_t blocks = (m + rows - 1) / rows;
    // kEpilogue: the depth is one kc block, so the panel kernel stores each product element
    // once, finished; the mapper of gemm_epilogue.h applies the update (and writes the
    // product, sums its squares) at that store, and nothing goes through a scratch block.
    const bool epilogue = in.p[7] & kEpilogue;
    const bool plain = in.p[7] & kUnitAlpha;
    T* leaves = sum && !epilogue ? sized(main.leaves, (total + kLeaf - 1) / kLeaf) : nullptr;
    if (sum && epilogue && static_cast<int64_t>(main.block_squares.size()) < blocks)
      main.block_squares.resize(blocks);
    double* block_squares = main.block_squares.data();

    // Past the step's deadline the blocks left are skipped (core/base/step_deadline.h); a
    // block that runs is computed as without a deadline.
    const int64_t deadline = thread_step_deadline();
    auto do_block = [&](int64_t blk) {
      if (deadline_passed(deadline)) [[unlikely]] return;
      Scratch<T>& s = Scratch<T>::get();
      const int64_t r0 = blk * rows, nr = std::min(rows, m - r0);
      const int64_t lo = r0 * n, hi = lo + nr * n;
      T* packed_rhs = sized(s.rhs, k * rows + 64);
      ei::gemm_pack_rhs<T, Index, RhsMapper, Traits::nr, kRhsOrder> pack_rhs;
      for (int64_t k2 = 0; k2 < k; k2 += kc)
        pack_rhs(packed_rhs + k2 * nr, rhs.getSubMapper(k2, r0), std::min(kc, k - k2), nr);
      if (plain) {  // out = op(A) op(B): the panel kernel adds into the zeroed rows directly
        T* out = in.output<T>(f) + lo;
        std::fill(out, out + nr * n, T(0));
        ei::gebp_kernel<T, T, Index, ResMapper, Traits::mr, Traits::nr, false, false> gebp;
        for (int64_t i2 = 0; i2 < n; i2 += mc) {
          const int64_t amc = std::min(mc, n - i2);
          for (int64_t k2 = 0; k2 < k; k2 += kc)
            gebp(ResMapper(out + i2, n), packed_lhs + i2 * k + k2 * amc, packed_rhs + k2 * nr, amc,
                 std::min(kc, k - k2), nr, T(1));
        }
        return;
      }
      if (epilogue) {
        T* out = in.output<T>(f) + lo;
        start_from_addend(in, f, out, lo, hi);
        GemmEpilogue<T> epi(out, product ? product + lo : nullptr, n, alpha, sum != nullptr);
        ei::gebp_kernel<T, T, Index, typename GemmEpilogue<T>::Mapper, Traits::mr, Traits::nr,
                        false, false>
            gebp;
        for (int64_t i2 = 0; i2 < n; i2 += mc) {
          const int64_t amc = std::min(mc, n - i2);
          gebp(epi.mapper(i2), packed_lhs + i2 * k, packed_rhs, amc, k, nr, T(1));
          epi.flush();
        }
        if (sum) block_squares[blk] = epi.squares();
        return;
      }
      // The scratch block is all zeros between uses: the update clears what it reads.
      T* prod = product ? product + lo : sized(s.block, rows * n);
      if (product) std::fill(prod, prod + nr * n, T(0));
      ei::gebp_kernel<T, T, Index, ResMapper, Traits::mr, Traits::nr, false, false> gebp;
      for (int64_t i2 = 0; i2 < n; i2 += mc) {
        const int64_t amc = std::min(mc, n - i2);
        for (int64_t k2 = 0; k2 < k; k2 += kc)
          gebp(ResMapper(prod + i2, n), packed_lhs + i2 * k + k2 * amc, packed_rhs + k2 * nr, amc,
               std::min(kc, k - k2), nr, T(1));
      }
      // The squares of each leaf that lies wholly in this block are summed while the block is
      // in cache; a leaf that straddles a block boundary (only when the product is written
      // out: select_gemm_update) is summed after every block is done.
      for (int64_t l = (lo + kLeaf - 1) / kLeaf; sum && l * kLeaf < hi; ++l) {
        const int64_t start = l * kLeaf, end = std::min(total, start + kLeaf);
        if (end > hi) break;
        leaves[l] = leaf_sum_of_squares(prod + (start - lo), end - start);
      }
      if (product) update<false>(in, f, alpha, prod, lo, hi);
      else update<true>(in, f, alpha, prod, lo, hi);
    };
    const int threads = std::min<int64_t>(blocks, intra_op_threads());
    if (threads > 1 && 2 * m * n * k >= (int64_t{1} << 22)) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        do_block(blk);
        fpe::collect_worker_flags();
      }
    } else {
      for (int64_t blk = 0; blk < blocks; ++blk) do_block(blk);
    }
    if (!sum) return;
    if (epilogue) {
      double total_squares = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) total_squares += block_squares[blk];
      *sum = static_cast<T>(total_squares);
      return;
    }
    const int64_t block_elems = rows * n;
    for (int64_t l = 0; l * kLeaf < total; ++l) {
      const int64_t start = l * kLeaf, end = std::min(total, start + kLeaf);
      if (start / block_elems != (end - 1) / block_elems)
        leaves[l] = leaf_sum_of_squares(product + start, end - start);
    }
    *sum = combine_leaves(leaves, 0, total);
  }

  // out[lo, hi) = the addend's elements [lo, hi) (zero without one).
  static void start_from_addend(const Instr& in, const Frame& f, T* out, int64_t lo, int64_t hi) {
    const int64_t n = in.p[2];
    switch (in.p[6]) {
      case kNoAddend: std::fill(out, out + (hi - lo), T(0)); break;
      case kSameShape:
        if (in.in<T>(f, 2) + lo != out) std::memcpy(out, in.in<T>(f, 2) + lo, (hi - lo) * sizeof(T));
        break;
      case kRowVector:
        for (int64_t r = 0; r < hi - lo; r += n) std::memcpy(out + r, in.in<T>(f, 2), n * sizeof(T));
        break;
      case kScalarAddend: std::fill(out, out + (hi - lo), *in.in<T>(f, 2)); break;
    }
  }

  // out[lo, hi) = fma(alpha, x, addend) with x the product's elements [lo, hi); with kClear,
  // x is set to zero as it is read.
  template <bool kClear>
  static void update(const Instr& in, const Frame& f, T alpha, T* x, int64_t lo, int64_t hi) {
    const T* addend = in.p[6] == kNoAddend ? nullptr : in.in<T>(f, 2);
    affine_update<T, kClear>(alpha, x, addend, in.p[6], in.p[2], lo, in.output<T>(f) + lo, hi - lo);
  }
};

template <class T>
KernelFn pick(bool ta, bool tb) {
  if (ta) return tb ? GemmUpdate<T, true, true>::run : GemmUpdate<T, true, false>::run;
  return tb ? GemmUpdate<T, false, true>::run : GemmUpdate<T, false, false>::run;
}

// Rows per block: a multiple of Eigen's register block of columns (so every product element
// goes through the same panel-kernel path as in one unblocked GEMM), about kScratchBytes of
// product; with a sum of squares and no product buffer, also whole leaves per block.
template <class T>
int64_t block_rows(int64_t m, int64_t n, bool leaves_in_block) {
  int64_t step = ei::gebp_traits<T, T>::nr;
  if (leaves_in_block) step = std::lcm(step, kLeaf / std::gcd(n, kLeaf));
  const int64_t want = std::max<int64_t>(1, kScratchBytes / static_cast<int64_t>(n * sizeof(T)));
  const int64_t rows = std::max(step, want / step * step);
  return std::min(rows, m);
}

// Fills p[0..5] and p[7] for out = addend + alpha * op(A) op(B) with op(A) op(B) of [m, n] over
// depth k: Eigen's blocking for one thread and the rows per block, both from the shapes alone,
// so no element's arithmetic depends on the thread count. False when the blocks cannot hold
// whole summation leaves (see select_gemm_update).
bool plan(Instr& instr, int64_t m, int64_t k, int64_t n, int64_t flags) {
  const int esize = static_cast<int>(dtype_size(instr.out.dtype));
  Index kc = k, mc = n, nc = m;
  if (esize == 4) ei::computeProductBlockingSizes<float, float, 1, Index>(kc, mc, nc, Index{1});
  else ei::computeProductBlockingSizes<double, double, 1, Index>(kc, mc, nc, Index{1});
  // The epilogue's update is an fma, as affine_update's is, only when the packet ops are
  // fused multiply-adds; without them every update goes through the scratch block.
#ifdef EIGEN_VECTORIZE_FMA
  const bool epilogue = kc >= k;
#else
  const bool epilogue = false;
#endif
  const bool leaves_in_block = (flags & kWithSum) && !(flags & kWithProduct) && !epilogue;
  const int64_t rows = esize == 4 ? block_rows<float>(m, n, leaves_in_block)
                                  : block_rows<double>(m, n, leaves_in_block);
  // Without a product buffer, a block must hold whole leaves; refuse an absurd scratch.
  if (leaves_in_block && rows < m && rows * n * esize > (int64_t{4} << 20)) return false;
  instr.p[0] = m;
  instr.p[1] = k;
  instr.p[2] = n;
  instr.p[3] = rows;
  instr.p[4] = std::max<Index>(1, kc);
  instr.p[5] = std::max<Index>(1, mc);
  instr.p[7] = flags | (epilogue ? kEpilogue : 0);
  return true;
}

}  // namespace

bool select_gemm_update(Instr& instr, const GemmUpdateForm& form) {
  instr.fn = nullptr;
  const size_t operands = instr.ins.size() - (form.alpha_operand ? 1 : 0);
  if (instr.ins.empty() || (operands != 2 && operands != 3)) return false;
  const DType t = instr.out.dtype;
  if (t != DType::f32 && t != DType::f64) return false;
  for (const ValueType& v : instr.ins)
    if (v.dtype != t) return false;
  const Shape& as = instr.ins[0].shape;
  const Shape& bs = instr.ins[1].shape;
  const Shape& cs = instr.out.shape;
  if (as.size() != 2 || bs.size() != 2 || cs.size() != 2 || instr.out.size() == 0) return false;
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  const int64_t m = cs[0], n = cs[1], k = ta ? as[0] : as[1];
  if (k == 0 || (ta ? as[1] : as[0]) != m || (tb ? bs[1] : bs[0]) != k || (tb ? bs[0] : bs[1]) != n)
    return false;
  const int esize = static_cast<int>(dtype_size(t));
  if (matmul_is_narrow(m, k, n, esize)) return false;
  if (form.alpha_operand && instr.ins.back().size() != 1) return false;
  if (!addend_form(cs, operands == 3 ? &instr.ins[2] : nullptr, &instr.p[6])) return false;
  const int64_t flags = (form.product ? kWithProduct : 0) | (form.sum_of_squares ? kWithSum : 0) |
                        (form.alpha_operand ? kAlphaOperand : 0);
  // f32 products that pay for the packing run on the packed GEMM (packed_update.h), with the
  // update in its tile epilogue, unless FJIT_GEMM=eigen.
  if (t == DType::f32 && packed_gemm_use() != PackedGemmUse::never && packed_gemm_pays(m, n, k)) {
    instr.p[0] = m;
    instr.p[1] = k;
    instr.p[2] = n;
    instr.p[3] = static_cast<int64_t>(active_isa());
    instr.p[7] = flags | kEpilogue;
    instr.fn = packed_update_kernel(ta, tb);
    return true;
  }
  if (!plan(instr, m, k, n, flags)) return false;
  instr.fn = esize == 4 ? pick<float>(ta, tb) : pick<double>(ta, tb);
  return true;
}

bool select_blocked_matmul(Instr& instr, int64_t m, int64_t k, int64_t n) {
  const DType t = instr.out.dtype;
  if ((t != DType::f32 && t != DType::f64) || m == 0 || k == 0 || n == 0) return false;
  instr.p[6] = kNoAddend;
  plan(instr, m, k, n, kUnitAlpha);
  // At least 8 blocks where the rows allow, so that 2, 4 or 8 threads share them evenly.
  const int64_t nr = t == DType::f32 ? int64_t{ei::gebp_traits<float, float>::nr}
                                     : int64_t{ei::gebp_traits<double, double>::nr};
  instr.p[3] = std::min(instr.p[3], std::max(nr, ((m + 7) / 8 + nr - 1) / nr * nr));
  const bool ta = instr.attrs.trans_a, tb = instr.attrs.trans_b;
  instr.fn = t == DType::f32 ? pick<float>(ta, tb) : pick<double>(ta, tb);
  return true;
}

bool gemm_update_in_epilogue(const Instr& instr) { return instr.fn && (instr.p[7] & kEpilogue); }

}  // namespace fjit
