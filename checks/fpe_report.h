// The fpe check mode (CheckMode::fpe, `--checks fpe`, FJIT_CHECKS=fpe): every-op checks from
// the CPU's own floating-point exception flags, and how its check reads in a report.
//
// What it does: the user's checks, plus, around every instruction of the step's plan, the
// sticky flags invalid, division by zero and overflow (core/base/fpe_flags.h) read and cleared
// on the plan's thread and collected from fjit's intra-op worker threads
// (Executable::run_fpe, core/compile/fpe_run.cc). No check node is added to the plan: a passing
// step costs one read of MXCSR and one relaxed load per instruction.
//
// Which flags count. Kernels raise flags on purpose: a select that discards x/0 where the
// denominator is 0, masked attention rows filled with -inf, log of 0 guarded by a where, exp
// of a large value in the unsubtracted path of a softmax. So a flag counts only when
//  1. the instruction that raised it left a non-finite value in its own result (a flag raised
//     inside a fused instruction whose select then discarded the value leaves none), and
//  2. a non-finite value reached the step's results (a masked row or a discarded quotient
//     computed by an instruction of its own never does).
// Then the first such instruction is reported, with its op (a fused instruction's label), its
// result and operand types, the non-finite count in its result, the call site of the op and
// the stack captured at trace time, as one check of kind fpe in the usual report.
//
// Limits: a value made non-finite without a flag (Eigen's vectorized exp saturates to inf
// without raising overflow; an input that already holds NaN or Inf, a
// select of an infinite constant) is not reported (use `all` for that); a flag raised in a
// GEMM library's own worker threads (BLIS) is not seen; a control-flow instruction (scan,
// while_loop, cond) is one instruction: its body's flags are reported at the loop, whose
// result the rules above read. Thread replicas of one process share the worker word, so one
// replica's worker flag can mark another's instruction; rule 1 and 2 then keep it from
// counting unless that instruction left a non-finite value of its own.
#pragma once

#include <span>
#include <string>

#include "core/compile/executable.h"

namespace fjit {

// The message of a raised fpe check from its payload (instruction, flags, non-finite count,
// first flat index), and in *where the site of the instruction's op.
std::string fpe_message(const Executable& exe, std::span<const double> values, const Site** where);

}  // namespace fjit
