// Internal: the kernel families that select_kernel() and reference_eval() dispatch to.
// Each returns false when the op is not one of its family.
#pragma once

#include "core/kernels/kernel.h"

namespace fjit::kernels {

// unary, binary, compare, logical, select, cast, isfinite, constant, iota
bool select_elementwise(Instr& instr);
bool reference_elementwise(Op op, const Attrs& attrs, const ValueType& out,
                           std::span<const Array> ins, Array& result);

// matmul, reductions, argmax, layout ops, gather, scatter_add, collectives
bool select_structural(Instr& instr);
bool reference_structural(Op op, const Attrs& attrs, const ValueType& out,
                          std::span<const Array> ins, const RunContext* ctx, Array& result);

// check
bool select_check(Instr& instr);

}  // namespace fjit::kernels
