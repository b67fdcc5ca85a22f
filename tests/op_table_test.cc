// The op table (core/ir/ops.def) against what the code does with each row: a row's facts are
// the only thing that decides an op's dtype rule, differentiability, automatic checks and
// builder, so a new row that states them wrong, or code that ignores them, fails here.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/autodiff/batching.h"
#include "core/ir/shape_rules.h"
#include "fjit.h"

namespace fjit {
namespace {

const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::i32, DType::boolean};

TEST(OpTable, NamesRoundTripAndRulesMatchDifferentiability) {
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    EXPECT_EQ(op_named(op_name(op)), op) << op_name(op);
    EXPECT_EQ(vjp_rule(op) != nullptr, op_is_differentiable(op)) << op_name(op);
    // Forward mode (the jvp column): every op with a VJP has a JVP, and no other op has one.
    EXPECT_EQ(op_has_jvp(op), op_is_differentiable(op)) << op_name(op);
    EXPECT_EQ(jvp_rule(op) != nullptr, op_is_differentiable(op)) << op_name(op);
    if (op_is_elementwise(op)) {
      EXPECT_EQ(op_kernel_family(op), KernelFamily::kElementwiseFamily) << op_name(op);
    }
  }
}

// The batch column: every row names a rule of the batching table (a missing one would not
// link), the rule's name fits the op's kind, and a rule named by a row is the one vmap runs.
TEST(OpTable, BatchColumnNamesARuleThatFitsTheKind) {
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    const std::string rule = op_batch_rule(op);
    EXPECT_NE(batching::batch_rule(op), nullptr) << op_name(op);
    EXPECT_FALSE(rule.empty()) << op_name(op);
    EXPECT_NE(rule, "unbatchable") << op_name(op) << ": every op of the table batches";
    switch (op_kind(op)) {
      case OpKind::kUnary: case OpKind::kBinary: case OpKind::kCompare: case OpKind::kLogical:
      case OpKind::kSelect:
        EXPECT_EQ(rule, "elementwise") << op_name(op);
        break;
      case OpKind::kReduce: EXPECT_EQ(rule, "axis_shift") << op_name(op); break;
      case OpKind::kMatMul: EXPECT_EQ(rule, "matmul") << op_name(op); break;
      case OpKind::kControl:
        EXPECT_EQ(rule, op == Op::Output ? "output" : "control") << op_name(op);
        break;
      case OpKind::kSource: EXPECT_EQ(rule, "source") << op_name(op); break;
      default: break;
    }
    if (op_arity(op) == 0) {
      EXPECT_EQ(rule, "source") << op_name(op);
    }
    for (int j = 0; j < i; ++j) {  // equal names, equal functions: the table reads the column
      if (rule == op_batch_rule(static_cast<Op>(j))) {
        EXPECT_EQ(batching::batch_rule(op), batching::batch_rule(static_cast<Op>(j))) << op_name(op);
      }
    }
  }
}

// The dtype rule of every unary op decides which operand dtypes its shape rule admits and
// the result's dtype.
TEST(OpTable, UnaryShapeRulesFollowTheRowsDTypeRule) {
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (op_kind(op) != OpKind::kUnary || op_dtype_rule(op) == DTypeRule::kGiven) continue;
    for (DType t : kAllDTypes) {
      const ValueType in{t, {3}};
      bool admitted = false;
      DType out = t;
      switch (op_dtype_rule(op)) {
        case DTypeRule::kFloat: admitted = is_floating(t); break;
        case DTypeRule::kNumeric: admitted = t != DType::boolean; break;
        case DTypeRule::kToBool: admitted = t != DType::boolean, out = DType::boolean; break;
        default: ADD_FAILURE() << op_name(op) << ": a unary op with a non-unary dtype rule";
      }
      const std::vector<ValueType> ins{in};
      if (admitted) {
        const ValueType r = infer_type(op, {}, ins, in);
        EXPECT_EQ(r.dtype, out) << op_name(op) << " of " << dtype_name(t);
        EXPECT_EQ(r.shape, in.shape) << op_name(op);
      } else {
        EXPECT_ANY_THROW(infer_type(op, {}, ins, in)) << op_name(op) << " of " << dtype_name(t);
      }
    }
  }
}

// Under CheckMode::all, every unary float op gets a NaN/Inf check on its result exactly when
// its row says it may overflow, and an operand check exactly when its row names one.
TEST(OpTable, AutomaticChecksFollowTheRows) {
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (op_kind(op) != OpKind::kUnary || op_dtype_rule(op) != DTypeRule::kFloat) continue;
    JitOptions o;
    o.checks = CheckMode::all;
    auto f = jit([op](const Tensor& x) { return detail::build(op_name(op), op, {x}, {}, {}, nullptr); }, o);
    f(Array::from_vector<float>({0.5f, 1.5f}, {2}));
    const Executable& exe = *f.core().last_entry()->exe;
    int nan_checks = 0, input_checks = 0;
    for (const CheckSite& s : exe.check_sites) {
      if (s.kind == CheckKind::nan) ++nan_checks;
      else if (s.kind != CheckKind::user) ++input_checks;
    }
    EXPECT_EQ(nan_checks, op_may_overflow(op) ? 1 : 0) << op_name(op);
    EXPECT_EQ(input_checks, op_input_check(op) ? 1 : 0) << op_name(op);
  }
}

// The input_check column names check kinds whose rows (core/ir/check_kinds.def) fit an operand
// check: they scan an operand the op has, with a rule the automatic-checks pass can build. And
// no row of the check-kind table is dead: every kind is a user check, the result check, the
// loss scaling's predicate check (parallel/train/loss_scaling.h), a while_loop's guard
// (core/compile/loop_guard.h), the fpe mode's site (checks/fpe_report.h), the sentinel's
// check (parallel/train/sentinel.h), or some op's input check.
TEST(OpTable, InputCheckColumnNamesOperandCheckKinds) {
  std::vector<bool> used(kNumCheckKinds, false);
  used[static_cast<size_t>(CheckKind::user)] = used[static_cast<size_t>(CheckKind::nan)] = true;
  used[static_cast<size_t>(CheckKind::loss_scale_overflow)] = true;
  EXPECT_EQ(check_kind_info(CheckKind::loss_scale_overflow).reads, CheckReads::kNothing);
  for (CheckKind k : {CheckKind::loop_trip_limit, CheckKind::step_timeout, CheckKind::fpe, CheckKind::sentinel}) {
    used[static_cast<size_t>(k)] = true;
    EXPECT_EQ(check_kind_info(k).reads, CheckReads::kNothing) << check_kind_name(k);
  }
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    const std::optional<CheckKind> kind = op_input_check(op);
    if (!kind) continue;
    used[static_cast<size_t>(*kind)] = true;
    const CheckKindInfo& info = check_kind_info(*kind);
    const int operand = check_operand(info.reads);
    EXPECT_GE(operand, 0) << op_name(op) << ": " << info.label << " does not read an operand";
    EXPECT_TRUE(op_arity(op) < 0 || operand < op_arity(op)) << op_name(op);
    EXPECT_TRUE(info.bad == BadRule::kZero || info.bad == BadRule::kBelowBound ||
                info.bad == BadRule::kOutsideRange || info.bad == BadRule::kOutsideLengthRange)
        << op_name(op);
  }
  for (size_t k = 0; k < used.size(); ++k)
    EXPECT_TRUE(used[k]) << "check kind " << check_kind_name(static_cast<CheckKind>(k))
                         << " is neither a user, a result nor an input check";
}

// The finite column against the reference kernels: over extreme and ordinary finite inputs, an
// op marked kStaysFinite gives only finite results and an op marked kMayOverflow gives some
// non-finite one (so a row cannot silently drop an op's NaN/Inf check).
TEST(OpTable, FiniteColumnMatchesTheReferenceKernels) {
  const Array x = Array::from_vector<float>({-3e38f, -3.f, -1.f, -0.5f, 0.f, 0.5f, 1.f, 3.f, 3e38f}, {9});
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (op_kind(op) != OpKind::kUnary || op_dtype_rule(op) == DTypeRule::kGiven ||
        op_dtype_rule(op) == DTypeRule::kToBool)
      continue;
    const std::vector<Array> ins{x};
    const Array y = reference_eval(op, {}, ValueType{DType::f32, {9}}, ins);
    bool all_finite = true;
    for (int k = 0; k < 9; ++k) all_finite = all_finite && std::isfinite(y.data<float>()[k]);
    EXPECT_EQ(all_finite, !op_may_overflow(op)) << op_name(op);
  }
}

}  // namespace
}  // namespace fjit
