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
#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "core/kernels/elementwise/elementwise_common.h"
#include "core/kernels/fused/fused.h"
#include "core/kernels/fused/fused_compiled.h"
#include "core/kernels/fused/fused_streams.h"
#include "core/base/fpe_flags.h"
#include "core/base/step_deadline.h"
#include "core/base/threads.h"

namespace fjit {
namespace {

using fused_streams::BlockAt;
using fused_streams::Streams;

constexpr int64_t kBlockElems = 1024;        // target elements per block
constexpr int64_t kScratchBytes = 64 << 10;  // registers for intermediates, on the stack
constexpr int64_t kSumLeaf = 2048;           // = blocked_sum's leaf in reduce.cc
constexpr int64_t kShortRow = 16;            // = reduce.cc's: shorter rows are folded, not reduxed
constexpr int64_t kPhase = 16;               // elements in a 64-byte vector of f32
constexpr int kMaxExternal = 32;
// Element-steps (elements x program steps) from which a fused pass is split among the
// intra-op threads: a few hundred microseconds of work, well above a parallel region's start.
constexpr int64_t kParallelWork = int64_t{1} << 20;
constexpr int kMaxScratch = 16;
constexpr int kMaxRegs = kMaxExternal + kMaxScratch + 1;

struct FusedPlan {
  int num_ext = 0;
  int num_scratch = 0;
  int64_t reg_bytes = 0;
  bool rows_mode = true;
  int64_t rows = 1, n = 1;  // collapsed output: rows x n
  int64_t block = 1;        // rows per block (rows mode) or elements per block (chunk mode)
  int64_t tail = 0;         // size of the last, shorter block (0: none)
  std::vector<int64_t> s0, s1, esize;  // per external operand, s0/s1 in elements
  int64_t out_esize = 0;
  // Further results: per extra, its own register (no other step writes it), its element size
  // and the external operands read by later steps. When its buffer overlaps none of those,
  // the register is the buffer itself and the step writes the result in place; otherwise it
  // is scratch, copied out once every step of a block has run.
  std::vector<int> extra_reg;
  std::vector<int64_t> extra_esize;
  std::vector<std::vector<int>> extra_later_reads;
  std::vector<Instr> full, last;  // per step; in_bufs / out_buf index the register table
  // Row sum (select_fused_row_sum): the last step writes scratch register sum_reg, and each
  // run of sum_len elements of it (a whole number of rows) is summed into the output (f32 or
  // f64 by out_esize).
  bool row_sum = false;
  int sum_reg = -1;
  int64_t sum_len = 0;
};

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

// The shape an external operand has inside a block of `block_rows` rows (rows mode) or
// `len` elements (chunk mode).
Shape operand_view(const FusedPlan& P, int k, int64_t extent) {
  const bool along_row = P.s1[k] == 1, along_rows = P.s0[k] != 0 || P.rows == 1;
  if (P.rows_mode) {
    if (along_row) return along_rows ? Shape{extent, P.n} : Shape{P.n};
    return along_rows ? Shape{extent, 1} : Shape{};
  }
  return along_row ? Shape{extent} : Shape{};
}

// Builds the per-step kernels for blocks of `extent` rows / elements; false if one is missing.
bool build_steps(FusedPlan& P, const std::vector<ValueType>& ins,
                 const std::vector<FusedOp>& program, const std::vector<int>& reg_of,
                 int64_t extent, std::vector<Instr>& steps) {
  const Shape block_shape = P.rows_mode ? Shape{extent, P.n} : Shape{extent};
  for (size_t i = 0; i < program.size(); ++i) {
    const FusedOp& op = program[i];
    Instr s;
    s.op = op.op;
    s.node = op.node;
    s.attrs = op.attrs;
    s.out = {op.dtype, block_shape};
    s.out_buf = reg_of[i];
    for (int a : op.args) {
      if (a >= 0) {
        s.ins.push_back({program[a].dtype, block_shape});
        s.in_bufs.push_back(reg_of[a]);
      } else {
        const int k = -1 - a;
        s.ins.push_back({ins[k].dtype, operand_view(P, k, extent)});
        s.in_bufs.push_back(k);
      }
    }
    try {
      select_kernel(s);
    } catch (const std::logic_error&) {
      return false;
    }
    if (!s.fn) return false;
    steps.push_back(std::move(s));
  }
  return true;
}

// The plan of `program` computing a value of type `value` from external operands `ins`; null
// when it cannot run fused. sum_leaf > 0: blocks of exactly sum_leaf elements along a single
// row (what the fused sum needs), with the last step writing a scratch leaf, not the output.
// extras: program steps (before the last) whose values are written too.
// row_len > 0: a row sum (select_fused_row_sum), in rows mode over rows of row_len elements.
std::shared_ptr<FusedPlan> make_plan(const ValueType& value, const std::vector<ValueType>& ins,
                                     const std::vector<FusedOp>& program, int64_t sum_leaf,
                                     const std::vector<int>& extras = {}, int64_t row_len = 0) {
  const int num_ext = static_cast<int>(ins.size());
  if (program.empty() || num_ext > kMaxExternal || value.size() == 0) return nullptr;
  if (program.back().dtype != value.dtype) return nullptr;
  // Collapse the output against the external operands the way the unfused kernels do.
  Instr probe;
  probe.out = value;
  probe.ins = ins;
  if (probe.ins.empty()) return nullptr;
  try {
    kernels::ew::plan_broadcast(probe);
  } catch (const std::logic_error&) {
    return nullptr;
  }
  auto P = std::make_shared<FusedPlan>();
  P->num_ext = num_ext;
  const int r = static_cast<int>(probe.p[0]);
  if (r > 2) return nullptr;
  P->rows = r == 2 ? probe.v[0] : 1;
  P->n = probe.v[r - 1];
  for (int k = 0; k < num_ext; ++k) {
    const int64_t s1 = probe.v[r + k * r + r - 1];
    const int64_t s0 = r == 2 ? probe.v[r + k * r] : 0;
    if (s1 == 1 ? (s0 != 0 && s0 != P->n) : (s0 != 0 && s0 != 1)) return nullptr;
    P->s0.push_back(s0);
    P->s1.push_back(s1);
    P->esize.push_back(dtype_size(ins[k].dtype));
  }
  if (row_len > 0) {  // walk whole runs being summed: a collapsed rank 1 splits into them
    if (r == 1) {
      if (P->n % row_len != 0) return nullptr;
      P->rows = P->n / row_len;
      P->n = row_len;
      for (int k = 0; k < num_ext; ++k) P->s0[k] = P->s1[k] == 1 ? row_len : 0;
    } else if (row_len % P->n != 0) {
      return nullptr;
    }
    P->row_sum = true;
    P->sum_len = row_len;
  }
  P->out_esize = dtype_size(value.dtype);
  // Registers: the last step writes the output; the others get a scratch register, reused
  // once every reader has run (never shared with a live operand, so no step runs in place).
  const int steps = static_cast<int>(program.size());
  std::vector<int> last_read(steps, -1);
  for (int i = 0; i < steps; ++i)
    for (int a : program[i].args) {
      if (a >= i) return nullptr;
      if (a >= 0) last_read[a] = i;
    }
  for (int e : extras) {
    if (e < 0 || e >= steps - 1) return nullptr;
    last_read[e] = steps;  // held to the end of the block, then copied out
  }
  std::vector<int> reg_of(steps, -1), free_regs;
  for (int i = 0; i < steps; ++i) {
    for (int j = 0; j < i; ++j)  // registers whose last reader was step i - 1 come free
      if (last_read[j] == i - 1 && j != steps - 1 && reg_of[j] >= num_ext)
        free_regs.push_back(reg_of[j]);
    const bool extra = std::find(extras.begin(), extras.end(), i) != extras.end();
    if (i == steps - 1 && !P->row_sum) {
      reg_of[i] = -2;  // the output, fixed below
    } else if (!free_regs.empty() && !extra) {  // an extra's register may become its buffer
      reg_of[i] = free_regs.back();
      free_regs.pop_back();
    } else {
      reg_of[i] = num_ext + P->num_scratch++;
    }
  }
  if (P->num_scratch > kMaxScratch) return nullptr;
  if (P->row_sum) P->sum_reg = reg_of[steps - 1];
  else reg_of[steps - 1] = num_ext + P->num_scratch;
  for (int e : extras) {
    P->extra_reg.push_back(reg_of[e]);
    P->extra_esize.push_back(dtype_size(program[e].dtype));
    std::vector<int> later;
    for (int i = e + 1; i < steps; ++i)
      for (int a : program[i].args)
        if (a < 0) later.push_back(-1 - a);
    P->extra_later_reads.push_back(std::move(later));
  }
  // Block size: about kBlockElems, within the scratch area. Every block starts at a flat
  // output index that is a multiple of kPhase, as the unfused kernels' spans do (rows or the
  // whole buffer from a 64-byte aligned start): Eigen computes the unaligned ends of a span
  // with scalar code, whose transcendental functions can differ from the vector ones in the
  // last bit, so equal phases are what make fused results bit-identical to unfused ones.
  int64_t max_esize = 1;
  for (const FusedOp& op : program) max_esize = std::max<int64_t>(max_esize, dtype_size(op.dtype));
  const int64_t cap =
      P->num_scratch > 0 ? kScratchBytes / (P->num_scratch * max_esize) : int64_t{1} << 40;
  const int64_t target = std::min(kBlockElems, cap / kPhase * kPhase);
  if (target < kPhase) return nullptr;
  // Rows that start out of phase are walked in groups of rows that end in phase.
  P->rows_mode = P->n < target || (P->rows > 1 && P->n % kPhase != 0) || P->row_sum;
  if (sum_leaf > 0) {
    if (P->rows != 1 || sum_leaf > cap) return nullptr;
    P->rows_mode = false;
    P->block = sum_leaf;
    P->tail = P->n % sum_leaf;
  } else if (P->rows_mode) {
    int64_t unit = kPhase / std::gcd(P->n, kPhase);  // rows per aligned unit
    if (P->row_sum) unit = std::lcm(unit, P->sum_len / P->n);  // and whole summed runs
    P->block = std::max(unit, target / P->n / unit * unit);
    if (P->block >= P->rows) P->block = P->rows;
    if (P->block * P->n > cap) return nullptr;
    P->tail = P->rows % P->block;
  } else {
    P->block = target;
    P->tail = P->n % P->block;
  }
  P->reg_bytes = ((P->rows_mode ? P->block * P->n : P->block) * max_esize + 63) / 64 * 64;
  if (!build_steps(*P, ins, program, reg_of, P->block, P->full)) return nullptr;
  if (P->tail && !build_steps(*P, ins, program, reg_of, P->tail, P->last)) return nullptr;
  return P;
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
