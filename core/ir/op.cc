#include "core/ir/op.h"

#include <string_view>

namespace fjit {
namespace {

struct OpInfo {
  const char* name;
  OpKind kind;
  int arity;
  DTypeRule dtype;
  bool differentiable;
  bool has_jvp;
  Finite finite;
  bool has_input_check;
  CheckKind input_check;
  KernelFamily family;
  const char* batch;
};

constexpr OpInfo kOps[] = {
#define no_check false, CheckKind::user
#define check(k) true, CheckKind::k
#define FJIT_OP(name, str, kind, arity, dtype, vjp, jvp, finite, input_check, family, builder, batch) \
  {str, OpKind::kind, arity, DTypeRule::dtype, std::string_view(#vjp) != "none",                     \
   std::string_view(#jvp) != "none",                                                                 \
   Finite::finite, input_check, KernelFamily::family, #batch},
#include "core/ir/ops.def"
#undef FJIT_OP
#undef check
#undef no_check
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kNumOps, "op table and enum disagree");

// Facts that must agree with each other, checked when the table is compiled.
constexpr bool rows_consistent() {
  for (const OpInfo& o : kOps) {
    const bool elementwise = o.kind == OpKind::kUnary || o.kind == OpKind::kBinary ||
                             o.kind == OpKind::kCompare || o.kind == OpKind::kLogical ||
                             o.kind == OpKind::kSelect;
    if (elementwise && o.family != KernelFamily::kElementwiseFamily) return false;
    if (o.kind == OpKind::kUnary && o.arity != 1) return false;
    if ((o.kind == OpKind::kBinary || o.kind == OpKind::kCompare) && o.arity != 2) return false;
    if (o.kind == OpKind::kCompare && (o.dtype != DTypeRule::kCompare || o.differentiable))
      return false;
    if (o.kind == OpKind::kLogical && (o.dtype != DTypeRule::kBool || o.differentiable))
      return false;
    if (o.dtype == DTypeRule::kToBool && o.differentiable) return false;
    // Forward and reverse mode differentiate the same ops.
    if (o.has_jvp != o.differentiable) return false;
    // Every elementwise op batches by broadcasting; an op without operands is never batched.
    if (elementwise && std::string_view(o.batch) != "elementwise") return false;
    if (o.arity == 0 && std::string_view(o.batch) != "source") return false;
  }
  return true;
}
static_assert(rows_consistent(), "core/ir/ops.def: a row's facts contradict each other");

const OpInfo& info(Op op) { return kOps[static_cast<int>(op)]; }

}  // namespace

const char* op_name(Op op) { return info(op).name; }
OpKind op_kind(Op op) { return info(op).kind; }
int op_arity(Op op) { return info(op).arity; }
DTypeRule op_dtype_rule(Op op) { return info(op).dtype; }
bool op_is_differentiable(Op op) { return info(op).differentiable; }
bool op_has_jvp(Op op) { return info(op).has_jvp; }
const char* op_batch_rule(Op op) { return info(op).batch; }
bool op_may_overflow(Op op) { return info(op).finite == Finite::kMayOverflow; }
std::optional<CheckKind> op_input_check(Op op) {
  if (!info(op).has_input_check) return std::nullopt;
  return info(op).input_check;
}
KernelFamily op_kernel_family(Op op) { return info(op).family; }

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::logical_or: return "logical_or";
  }
  return "?";
}

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

}  // namespace fjit
