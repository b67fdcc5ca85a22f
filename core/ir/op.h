// The op enum and every static fact about an op, generated from core/ir/ops.def (the one op
// table): nothing here or elsewhere lists ops a second time.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "core/ir/check_kind.h"

namespace fjit {

enum class OpKind : uint8_t {
  kSource, kUnary, kBinary, kCompare, kLogical, kSelect, kMatMul, kReduce, kLayout, kIndex,
  kCollective, kRandom, kEffect, kControl, kAttention
};

// How the result's dtype follows from the operands' (see ops.def).
enum class DTypeRule : uint8_t { kNumeric, kFloat, kToBool, kCompare, kBool, kGiven, kOwn };
// Whether finite inputs can give a non-finite float result (the automatic NaN/Inf check).
enum class Finite : uint8_t { kStaysFinite, kMayOverflow };
// The automatic check of an operand's domain (core/compile/passes/automatic_checks.cc).
// How an all_reduce combines (the attribute of Op::AllReduce, and what a Communicator does).
enum class ReduceOp : uint8_t { sum, max, min, logical_or };
const char* reduce_op_name(ReduceOp op);

// Which kernel family runs the op (core/kernels/families.h).
// kControlFamily: the compiler lowers the op's sub-graphs into plans of their own and sets
// the instruction's function itself (core/compile/control_flow.h).
enum class KernelFamily : uint8_t {
  kNoKernel, kElementwiseFamily, kStructuralFamily, kCheckFamily, kControlFamily
};

enum class Op : uint8_t {
#define FJIT_OP(name, ...) name,
#include "core/ir/ops.def"
#undef FJIT_OP
};

inline constexpr int kNumOps = 0
#define FJIT_OP(...) +1
#include "core/ir/ops.def"
#undef FJIT_OP
    ;

// The op whose name is `name`, at compile time where `name` is a constant (a name that is not
// in the table is then a compile error).
constexpr Op op_named(std::string_view name) {
  constexpr std::string_view kNames[] = {
#define FJIT_OP(name, str, ...) str,
#include "core/ir/ops.def"
#undef FJIT_OP
  };
  for (int i = 0; i < kNumOps; ++i)
    if (kNames[i] == name) return static_cast<Op>(i);
  throw std::invalid_argument("op_named: no such op");
}

const char* op_name(Op op);
OpKind op_kind(Op op);
// Number of inputs; -1 for variadic.
int op_arity(Op op);
DTypeRule op_dtype_rule(Op op);
// Elementwise: output element i depends only on element i of each (broadcast) input.
bool op_is_elementwise(Op op);
// Ops with effects beyond their value (checks, collectives) are never removed or merged.
bool op_has_effect(Op op);
// Ops with a VJP rule (a row whose vjp is not `none`); the rest have an identically zero or
// undefined gradient (comparisons, integer results...).
bool op_is_differentiable(Op op);
// Ops with a JVP rule (a row whose jvp column is not `none`): exactly the differentiable ops
// (core/ir/op.cc asserts it when the table is compiled). The rules are jvp_<jvp> of
// core/autodiff/jvp.h, collected from the column by core/autodiff/jvp_rule_table.cc, so a row
// naming a rule nobody defines fails to link.
bool op_has_jvp(Op op);
// True when finite operands can give a non-finite float result.
bool op_may_overflow(Op op);
// The automatic check of an operand (the row's input_check column): a check kind whose row in
// core/ir/check_kinds.def says which operand it reads; nullopt for no_check.
std::optional<CheckKind> op_input_check(Op op);
KernelFamily op_kernel_family(Op op);
// The name of the op's batching rule (the row's batch column): vmap (core/autodiff/vmap.h)
// runs batch_<name>, which core/autodiff/ must define, so a row naming no rule fails to link.
const char* op_batch_rule(Op op);

}  // namespace fjit
