// Compiled fused programs (internal to core/kernels/fused/ and to the library that declares
// them): a fused elementwise program that a registered compiled program computes runs as that
// program's loop (compiled_loop.h), one pass over vector packets with every intermediate in
// a register, instead of op by op over blocks.
//
// The programs are recorded from their declarations (compiled_program.h; the optimizers'
// updates, core/lib/optimizers_compiled.cc) and registered when first needed. A fused program
// matches a compiled one when they are the same DAG: a one-to-one map between their steps
// with the same ops, operands in the same places except that add and mul may take theirs in
// either order, and a map from the compiled program's leaves to the instruction's operands
// (several leaves may read one operand, as when two hyper-parameters are equal constants).
// The order of the steps, and which further result is which, do not matter.
#pragma once

#include <span>
#include <vector>

#include "core/kernels/fused/compiled_loop.h"
#include "core/kernels/fused/fused.h"

namespace fjit {

// Makes `entries` candidates of select_compiled_fused, after those registered before; an
// entry whose program is registered already is skipped. Thread-safe.
void register_compiled_programs(std::span<const compiled::CompiledEntry> entries);

// Prepares `instr` as select_fused_elementwise does when a registered compiled program
// matches `program` and `extras` (see above): every step of `program` is f32 or f64 of the
// output's type, and each operand has the output's shape where the compiled program reads a
// full leaf, a single element where it reads a scalar. The first registered program that
// matches is taken. Returns false, leaving instr untouched, otherwise. Results may alias
// external operands of their shape, as fused.h allows.
bool select_compiled_fused(Instr& instr, const std::vector<FusedOp>& program,
                           const std::vector<int>& extras);

}  // namespace fjit
