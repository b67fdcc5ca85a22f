#include "core/ir/op.h"

namespace fjit {
namespace {
struct OpInfo {
  const char* name;
  OpKind kind;
  int arity;
};
constexpr OpInfo kOps[] = {
#define FJIT_OP(name, str, kind, arity) {str, OpKind::kind, arity},
#include "core/ir/ops.def"
#undef FJIT_OP
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kNumOps, "op table and enum disagree");
}  // namespace

const char* op_name(Op op) { return kOps[static_cast<int>(op)].name; }
OpKind op_kind(Op op) { return kOps[static_cast<int>(op)].kind; }
int op_arity(Op op) { return kOps[static_cast<int>(op)].arity; }

bool op_is_elementwise(Op op) {
  switch (op_kind(op)) {
    case OpKind::kUnary: case OpKind::kBinary: case OpKind::kCompare: case OpKind::kLogical:
    case OpKind::kSelect:
      return true;
    default:
      return false;
  }
}

bool op_has_effect(Op op) {
  return op_kind(op) == OpKind::kEffect || op_kind(op) == OpKind::kCollective;
}

bool op_is_differentiable(Op op) {
  switch (op_kind(op)) {
    case OpKind::kCompare: case OpKind::kLogical: case OpKind::kEffect:
      return false;
    default:
      return op != Op::ArgMax && op != Op::ReduceAll && op != Op::ReduceAny && op != Op::Iota &&
             op != Op::AxisIndex && op != Op::Sign && op != Op::IsFinite;
  }
}

}  // namespace fjit
