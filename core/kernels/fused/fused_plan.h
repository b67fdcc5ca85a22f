// The plan of a fused elementwise pass (internal to core/kernels/fused/): how the output and
// the external operands are collapsed and cut into blocks, the registers of the program's
// steps and the steps' kernels for full and last blocks. fused_elementwise.cc runs it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernels/fused/fused.h"

namespace fjit::fused_plan {

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

// The plan of `program` computing a value of type `value` from external operands `ins`; null
// when it cannot run fused. sum_leaf > 0: blocks of exactly sum_leaf elements along a single
// row (what the fused sum needs), with the last step writing a scratch leaf, not the output.
// extras: program steps (before the last) whose values are written too.
// row_len > 0: a row sum (select_fused_row_sum), in rows mode over rows of row_len elements.
std::shared_ptr<FusedPlan> make_plan(const ValueType& value, const std::vector<ValueType>& ins,
                                     const std::vector<FusedOp>& program, int64_t sum_leaf,
                                     const std::vector<int>& extras = {}, int64_t row_len = 0);

}  // namespace fjit::fused_plan
