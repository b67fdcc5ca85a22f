// The fused elementwise kernel (see fused.h): a program of elementwise ops run block by block.
//
// The output shape and the external operands are collapsed as the unfused kernels collapse
// them (plan_broadcast): to M rows of n elements, each operand with a stride s0 along rows and
// s1 (0 or 1) along a row. Only patterns of collapsed rank <= 2 are fused, which covers same
// shapes, scalars, row vectors ([M,N] with [N]) and columns ([M,N] with [M,1]). Blocks are
//   rows mode   (n < block): R whole rows, block shape [R, n]
//   chunk mode  (n >= block): L consecutive elements of one row, block shape [L]
// and in each block an operand is a pointer base + row*s0 + col*s1 with a shape that the
// step kernels broadcast from: [R,n] or [L] (full), [n] (row vector), [R,1] (column), [].
// Each step has two prepared kernels, one for full blocks and one for the last, shorter block.
// The plan (collapsing, blocks, registers, the steps' kernels) is made in fused_plan.cc.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "core/kernels/elementwise/elementwise_common.h"
#include "core/kernels/fused/fused.h"
#include "core/kernels/fused/fused_compiled.h"
#include "core/kernels/fused/fused_plan.h"
#include "core/kernels/fused/fused_streams.h"
#include "core/base/fpe_flags.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"

namespace fjit {
namespace {

using fused_streams::BlockAt;
using fused_streams::Streams;

using namespace fused_plan;  // FusedPlan, make_plan, the block and register limits

// The sums of the `rows` rows of n elements at `leaf` into out[first row...], as the unfused
// row reduction computes each (reduce.cc, rows_kernel: one Eigen redux per row of at most
// kSumLeaf elements; the leaf's rows start at the same offsets modulo 64 bytes as the
// materialized value's).
template <class T>
void sum_rows(const void* leaf, int64_t rows, int64_t n, void* out) {
  for (int64_t r = 0; r < rows; ++r)
    static_cast<T*>(out)[r] =
        Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(static_cast<const T*>(leaf) + r * n, n).sum();
}

// Where block b lies.
BlockAt block_at(const FusedPlan& P, int64_t b) {
  const int64_t per_row = P.rows_mode ? 1 : (P.n + P.block - 1) / P.block;
  const int64_t row = P.rows_mode ? b * P.block : b / per_row;
  const int64_t col = P.rows_mode ? 0 : (b % per_row) * P.block;
  const bool last = P.rows_mode ? row + P.block > P.rows : col + P.block > P.n;
  const int64_t elems = P.rows_mode ? (last ? P.tail : P.block) * P.n : (last ? P.tail : P.block);
  return {row, col, elems, last};
}

// Blocks [b0, b1) in the order of a walk over the output: rows mode numbers blocks of rows,
// chunk mode the chunks of each row in turn.
// Past the step's deadline (core/base/step_deadline.h; asked every kDeadlineBlocks blocks)
// the blocks left are skipped.
constexpr int64_t kDeadlineBlocks = 64;
void run_blocks(const FusedPlan& P, const Instr& in, const Frame& f, int64_t b0, int64_t b1,
                const bool* direct, int64_t deadline) {
  alignas(64) std::byte scratch[kScratchBytes];
  void* regs[kMaxRegs];
  const int out_reg = P.num_ext + P.num_scratch;
  const int num_steps = static_cast<int>(P.full.size());
  for (int s = 0; s < P.num_scratch; ++s) regs[P.num_ext + s] = scratch + s * P.reg_bytes;
  std::byte* out = in.output<std::byte>(f);
  const Frame sub{regs, f.ctx};
  Streams<kMaxRegs> S;
  int64_t lines_per_block = 0;
  for (int k = 0; k < P.num_ext; ++k)
    if (P.s1[k] == 1 && (P.s0[k] != 0 || P.rows == 1)) S.add(in.in<std::byte>(f, k), P.s0[k], 1, P.esize[k], false);
  if (!P.row_sum) S.add(out, P.n, 1, P.out_esize, true);
  for (size_t e = 0; e < P.extra_reg.size(); ++e)
    S.add(f.bufs[in.in_bufs[P.num_ext + e]], P.n, 1, P.extra_esize[e], true);
  for (int k = 0; k < S.count; ++k) lines_per_block += (P.block * (P.rows_mode ? P.n : 1) * S.esize[k] + 63) / 64;
  for (int64_t b = b0; b < b1; ++b) {
    if (deadline != 0 && (b - b0) % kDeadlineBlocks == 0 && deadline_passed(deadline)) [[unlikely]] return;
    const BlockAt at = block_at(P, b);
    const bool prefetch = b + 1 < b1;
    const BlockAt next = prefetch ? block_at(P, b + 1) : at;
    for (int k = 0; k < P.num_ext; ++k)
      regs[k] = const_cast<std::byte*>(in.in<std::byte>(f, k)) +
                (at.row * P.s0[k] + at.col * P.s1[k]) * P.esize[k];
    const int64_t pos = at.row * P.n + at.col;
    if (!P.row_sum) regs[out_reg] = out + pos * P.out_esize;
    for (size_t e = 0; e < P.extra_reg.size(); ++e)
      if (direct[e])
        regs[P.extra_reg[e]] = static_cast<std::byte*>(f.bufs[in.in_bufs[P.num_ext + e]]) + pos * P.extra_esize[e];
    const std::vector<Instr>& steps = at.last ? P.last : P.full;
    for (int i = 0; i < num_steps; ++i) {
      if (prefetch)
        prefetch_lines(S, next, lines_per_block * i / num_steps, lines_per_block * (i + 1) / num_steps);
      steps[i].fn(steps[i], sub);
    }
    for (size_t e = 0; e < P.extra_reg.size(); ++e) {  // further results, after every read
      if (direct[e]) continue;
      auto* dst = static_cast<std::byte*>(f.bufs[in.in_bufs[P.num_ext + e]]);
      std::memcpy(dst + pos * P.extra_esize[e], regs[P.extra_reg[e]], at.elems * P.extra_esize[e]);
    }
    if (P.row_sum) {
      const int64_t sums = at.elems / P.sum_len, first = at.row * P.n / P.sum_len;
      if (P.out_esize == 4) sum_rows<float>(regs[P.sum_reg], sums, P.sum_len, out + first * 4);
      else sum_rows<double>(regs[P.sum_reg], sums, P.sum_len, out + first * 8);
    }
  }
}

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// Blocks are fixed by the shapes and each is computed the same way on any thread, so
// intra-op threads (contiguous ranges of blocks) change no bit of the results.
void run_fused(const Instr& in, const Frame& f) {
  const FusedPlan& P = *static_cast<const FusedPlan*>(in.prepared.get());
  const int64_t blocks = P.rows_mode ? (P.rows + P.block - 1) / P.block
                                     : P.rows * ((P.n + P.block - 1) / P.block);
  const int64_t work = P.rows * P.n * static_cast<int64_t>(P.full.size());
  // A further result is written in place unless a later step reads an operand it overlaps.
  bool direct[kMaxRegs];
  for (size_t e = 0; e < P.extra_reg.size(); ++e) {
    const void* dst = f.bufs[in.in_bufs[P.num_ext + e]];
    const int64_t bytes = P.rows * P.n * P.extra_esize[e];
    direct[e] = true;
    for (int k : P.extra_later_reads[e])
      if (overlaps(dst, bytes, in.in<std::byte>(f, k), in.ins[k].size() * P.esize[k])) direct[e] = false;
  }
  const int threads = work >= kParallelWork ? static_cast<int>(std::min<int64_t>(blocks, intra_op_threads())) : 1;
  const int64_t deadline = thread_step_deadline();
  if (threads <= 1) return run_blocks(P, in, f, 0, blocks, direct, deadline);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    run_blocks(P, in, f, blocks * t / threads, blocks * (t + 1) / threads, direct, deadline);
    fpe::collect_worker_flags();
  }
}

// The fused full sum: the program's values are summed leaf by leaf in the very tree of the
// unfused full-sum kernel (core/kernels/structural/reduce.cc, blocked_sum: leaves of kSumLeaf elements,
// Eigen's redux inside a leaf, pairwise above), so the result is bit-identical to summing the
// materialized value.
template <class T>
T fused_sum(const FusedPlan& P, const Instr& in, const Frame& f, void** regs, T* leaf, int64_t lo,
            int64_t n) {
  if (n <= kSumLeaf) {
    for (int k = 0; k < P.num_ext; ++k)
      regs[k] = const_cast<std::byte*>(in.in<std::byte>(f, k)) + lo * P.s1[k] * P.esize[k];
    const Frame sub{regs, f.ctx};
    for (const Instr& s : n == P.block ? P.full : P.last) s.fn(s, sub);
    return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(leaf, n).sum();
  }
  const int64_t half = ((n / kSumLeaf + 1) / 2) * kSumLeaf;
  return fused_sum<T>(P, in, f, regs, leaf, lo, half) +
         fused_sum<T>(P, in, f, regs, leaf, lo + half, n - half);
}

template <class T>
void run_fused_sum(const Instr& in, const Frame& f) {
  const FusedPlan& P = *static_cast<const FusedPlan*>(in.prepared.get());
  alignas(64) std::byte scratch[kScratchBytes];
  alignas(64) T leaf[kSumLeaf];
  void* regs[kMaxRegs];
  for (int s = 0; s < P.num_scratch; ++s) regs[P.num_ext + s] = scratch + s * P.reg_bytes;
  regs[P.num_ext + P.num_scratch] = leaf;
  *in.output<T>(f) = fused_sum<T>(P, in, f, regs, leaf, 0, P.n);
}

}  // namespace

bool select_fused_elementwise(Instr& instr, const std::vector<FusedOp>& program,
                              const std::vector<int>& extras) {
  instr.fn = nullptr;
  if (select_compiled_fused(instr, program, extras)) return true;
  auto P = make_plan(instr.out, instr.ins, program, 0, extras);
  if (!P) return false;
  instr.prepared = P;
  instr.fn = &run_fused;
  return true;
}

bool select_fused_row_sum(Instr& instr, const ValueType& value, int64_t row_len,
                          const std::vector<FusedOp>& program, const std::vector<int>& extras) {
  instr.fn = nullptr;
  if (value.dtype != DType::f32 && value.dtype != DType::f64) return false;
  if (instr.out.dtype != value.dtype || row_len < kShortRow || row_len > kSumLeaf ||
      value.size() % row_len != 0 || instr.out.size() != value.size() / row_len)
    return false;
  auto P = make_plan(value, instr.ins, program, 0, extras, row_len);
  if (!P) return false;
  instr.prepared = P;
  instr.fn = &run_fused;
  return true;
}

bool select_fused_sum(Instr& instr, const ValueType& value, const std::vector<FusedOp>& program) {
  instr.fn = nullptr;
  if (instr.out.size() != 1 || instr.out.dtype != value.dtype) return false;
  if (value.dtype != DType::f32 && value.dtype != DType::f64) return false;
  auto P = make_plan(value, instr.ins, program, kSumLeaf);
  if (!P) return false;
  instr.prepared = P;
  instr.fn = value.dtype == DType::f32 ? &run_fused_sum<float> : &run_fused_sum<double>;
  return true;
}

std::string fused_program_string(const std::vector<FusedOp>& program) {
  std::ostringstream os;
  for (size_t i = 0; i < program.size(); ++i) {
    const FusedOp& op = program[i];
    os << (i ? "; " : "") << "%" << op.node << " = " << op_name(op.op) << "(";
    for (size_t k = 0; k < op.args.size(); ++k) {
      const int a = op.args[k];
      os << (k ? ", " : "");
      if (a >= 0)
        os << "%" << program[a].node;
      else
        os << "in" << -1 - a;
    }
    os << ")";
  }
  return os.str();
}

}  // namespace fjit
