// Compiled fused programs (internal to core/kernels/fused/fused_elementwise.cc): fused elementwise
// programs known when fjit is built, such as Adam's update, each evaluated in one loop over
// vector packets with every intermediate in a register, instead of op by op over blocks.
//
// A compiled program is a table of steps; the same table decides whether a program matches
// and generates the loop, so the two cannot disagree. Its steps are ops whose every element
// is correctly rounded (add, sub, mul, div, sqrt), evaluated in the program's order and
// operand order with no contraction into fma (the file is built with -ffp-contract=off), and
// packets cover each buffer from its start as the unfused kernels' do: so the results are
// bit-identical to the unfused kernels' on any thread count.
#pragma once

#include <vector>

#include "core/kernels/fused/fused.h"

namespace fjit {

// Prepares `instr` as select_fused_elementwise does when a compiled program matches
// `program` and `extras` exactly (the ops, their operands, the further results), every value
// is f32 or f64 of the output's type and every external operand has the output's shape or a
// single element, as the program's table says. Returns false, leaving instr untouched,
// otherwise. Results may alias external operands of their shape, as fused.h allows.
bool select_compiled_fused(Instr& instr, const std::vector<FusedOp>& program,
                           const std::vector<int>& extras);

}  // namespace fjit
