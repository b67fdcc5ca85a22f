// The VJP rule table: one entry per op, in the op table's order, generated from the vjp
// column of core/ir/ops.def. A row that names a rule nobody defines fails to link.
#include <stdexcept>
#include <string>

#include "core/autodiff/autodiff.h"

namespace fjit {
namespace autodiff {

std::vector<Tensor> rule_none(const VjpArgs& a) {
  throw std::logic_error(std::string("no VJP rule for ") + op_name(a.node.op));
}

namespace {
constexpr VjpRule kRules[] = {
#define FJIT_OP(name, str, kind, arity, dtype, vjp, ...) &rule_##vjp,
#include "core/ir/ops.def"
#undef FJIT_OP
};
static_assert(sizeof(kRules) / sizeof(kRules[0]) == kNumOps, "rule table and op table disagree");
}  // namespace

}  // namespace autodiff

VjpRule vjp_rule(Op op) {
  return op_is_differentiable(op) ? autodiff::kRules[static_cast<int>(op)] : nullptr;
}

}  // namespace fjit
