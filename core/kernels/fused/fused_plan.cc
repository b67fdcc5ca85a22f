// The plan of a fused elementwise pass (fused_plan.h): collapsing, blocks, registers, the
// steps' kernels.
#include "core/kernels/fused/fused_plan.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "core/kernels/elementwise/elementwise_common.h"

namespace fjit::fused_plan {
namespace {

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

}  // namespace

// make_plan (fused_plan.h).
std::shared_ptr<FusedPlan> make_plan(const ValueType& value, const std::vector<ValueType>& ins,
                                     const std::vector<FusedOp>& program, int64_t sum_leaf,
                                     const std::vector<int>& extras, int64_t row_len) {
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

}  // namespace fjit::fused_plan
