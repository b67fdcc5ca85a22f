// The op enum and its static properties, generated from core/ops.def (the one op table).
#pragma once

#include <cstdint>

namespace fjit {

enum class OpKind : uint8_t {
  kSource, kUnary, kBinary, kCompare, kLogical, kSelect, kMatMul, kReduce, kLayout, kIndex,
  kCollective, kEffect
};

enum class Op : uint8_t {
#define FJIT_OP(name, str, kind, arity) name,
#include "core/ir/ops.def"
#undef FJIT_OP
};

inline constexpr int kNumOps = 0
#define FJIT_OP(name, str, kind, arity) +1
#include "core/ir/ops.def"
#undef FJIT_OP
    ;

const char* op_name(Op op);
OpKind op_kind(Op op);
// Number of inputs; -1 for variadic.
int op_arity(Op op);
// Elementwise: output element i depends only on element i of each (broadcast) input.
bool op_is_elementwise(Op op);
// Ops with effects beyond their value (checks, collectives) are never removed or merged.
bool op_has_effect(Op op);
// Ops whose gradient is identically zero or undefined (comparisons, integer results...).
bool op_is_differentiable(Op op);

}  // namespace fjit
