// Builders for sources and elementwise ops (see core/trace/ops.h).
#include "core/trace/ops.h"

namespace fjit {
namespace {
ValueType no_hint() { return {DType::f32, {}}; }

Tensor unary(const char* name, Op op, const Tensor& x, const Loc* loc) {
  return detail::build(name, op, {x}, {}, no_hint(), loc);
}
Tensor binary(const char* name, Op op, const Tensor& a, const Tensor& b, const Loc* loc) {
  return detail::build(name, op, {a, b}, {}, no_hint(), loc);
}
// A C++ number next to a tensor takes the tensor's dtype.
Tensor weak(const Tensor& like, double v) {
  if (!like.defined()) detail::fail("scalar", {}, "operand is an undefined Tensor", nullptr);
  Attrs a;
  a.scalar = v;
  return detail::build("scalar", Op::Constant, {}, std::move(a), ValueType{like.dtype(), {}}, nullptr);
}
}  // namespace

Tensor full(DType dtype, const Shape& shape, double value, Loc loc) {
  for (int64_t d : shape)
    if (d < 0) detail::fail("full", {}, "negative extent in shape " + shape_str(shape), &loc);
  Attrs a;
  a.scalar = value;
  return detail::build("full", Op::Constant, {}, std::move(a), ValueType{dtype, shape}, &loc);
}
Tensor scalar(DType dtype, double value, Loc loc) { return full(dtype, {}, value, loc); }
Tensor zeros_like(const Tensor& x, Loc loc) { return full(x.dtype(), x.shape(), 0.0, loc); }
Tensor ones_like(const Tensor& x, Loc loc) { return full(x.dtype(), x.shape(), 1.0, loc); }
Tensor constant(const Array& value, Loc loc) { return Tensor(value, loc); }

Tensor iota(DType dtype, const Shape& shape, int64_t axis, Loc loc) {
  const int64_t r = static_cast<int64_t>(shape.size());
  if (axis < -r || axis >= r)
    detail::fail("iota", {}, "axis " + std::to_string(axis) + " out of range for shape " + shape_str(shape), &loc);
  Attrs a;
  a.axis = axis < 0 ? axis + r : axis;
  return detail::build("iota", Op::Iota, {}, std::move(a), ValueType{dtype, shape}, &loc);
}

// The unary builders, one per row of core/ir/ops.def whose builder column is unary(fn); fn is
// the op's name, so op_named finds the op at compile time.
#define FJIT_BUILDER_custom
#define FJIT_BUILDER_unary(fn)                       \
  Tensor fn(const Tensor& x, Loc loc) {              \
    static constexpr Op kOp = op_named(#fn);         \
    return unary(#fn, kOp, x, &loc);                 \
  }
#define FJIT_OP(name, str, kind, arity, dtype, vjp, jvp, finite, input_check, family, builder, batch) \
  FJIT_BUILDER_##builder
#include "core/ir/ops.def"
#undef FJIT_OP
#undef FJIT_BUILDER_unary
#undef FJIT_BUILDER_custom
Tensor square(const Tensor& x, Loc loc) { return binary("square", Op::Mul, x, x, &loc); }
Tensor gelu_exact(const Tensor& x, Loc loc) { return unary("gelu", Op::Gelu, x, &loc); }
Tensor gelu_exact_grad(const Tensor& x, Loc loc) { return unary("gelu_grad", Op::GeluGrad, x, &loc); }

Tensor cast(const Tensor& x, DType dtype, Loc loc) {
  if (x.defined() && x.dtype() == dtype) return x;
  return detail::build("cast", Op::Cast, {x}, {}, ValueType{dtype, {}}, &loc);
}

Tensor add(const Tensor& a, const Tensor& b, Loc loc) { return binary("add", Op::Add, a, b, &loc); }
Tensor sub(const Tensor& a, const Tensor& b, Loc loc) { return binary("sub", Op::Sub, a, b, &loc); }
Tensor mul(const Tensor& a, const Tensor& b, Loc loc) { return binary("mul", Op::Mul, a, b, &loc); }
Tensor div(const Tensor& a, const Tensor& b, Loc loc) { return binary("div", Op::Div, a, b, &loc); }
Tensor pow(const Tensor& a, const Tensor& b, Loc loc) { return binary("pow", Op::Pow, a, b, &loc); }
Tensor maximum(const Tensor& a, const Tensor& b, Loc loc) { return binary("maximum", Op::Maximum, a, b, &loc); }
Tensor minimum(const Tensor& a, const Tensor& b, Loc loc) { return binary("minimum", Op::Minimum, a, b, &loc); }
Tensor eq(const Tensor& a, const Tensor& b, Loc loc) { return binary("eq", Op::Eq, a, b, &loc); }
Tensor ne(const Tensor& a, const Tensor& b, Loc loc) { return binary("ne", Op::Ne, a, b, &loc); }
Tensor lt(const Tensor& a, const Tensor& b, Loc loc) { return binary("lt", Op::Lt, a, b, &loc); }
Tensor le(const Tensor& a, const Tensor& b, Loc loc) { return binary("le", Op::Le, a, b, &loc); }
Tensor gt(const Tensor& a, const Tensor& b, Loc loc) { return binary("gt", Op::Gt, a, b, &loc); }
Tensor ge(const Tensor& a, const Tensor& b, Loc loc) { return binary("ge", Op::Ge, a, b, &loc); }
Tensor logical_and(const Tensor& a, const Tensor& b, Loc loc) { return binary("logical_and", Op::LogicalAnd, a, b, &loc); }
Tensor logical_or(const Tensor& a, const Tensor& b, Loc loc) { return binary("logical_or", Op::LogicalOr, a, b, &loc); }

Tensor where(const Tensor& c, const Tensor& a, const Tensor& b, Loc loc) {
  return detail::build("where", Op::Select, {c, a, b}, {}, no_hint(), &loc);
}

Tensor operator-(const Tensor& x) { return unary("neg", Op::Neg, x, nullptr); }
Tensor operator+(const Tensor& a, const Tensor& b) { return binary("add", Op::Add, a, b, nullptr); }
Tensor operator-(const Tensor& a, const Tensor& b) { return binary("sub", Op::Sub, a, b, nullptr); }
Tensor operator*(const Tensor& a, const Tensor& b) { return binary("mul", Op::Mul, a, b, nullptr); }
Tensor operator/(const Tensor& a, const Tensor& b) { return binary("div", Op::Div, a, b, nullptr); }
Tensor operator+(const Tensor& a, double b) { return binary("add", Op::Add, a, weak(a, b), nullptr); }
Tensor operator-(const Tensor& a, double b) { return binary("sub", Op::Sub, a, weak(a, b), nullptr); }
Tensor operator*(const Tensor& a, double b) { return binary("mul", Op::Mul, a, weak(a, b), nullptr); }
Tensor operator/(const Tensor& a, double b) { return binary("div", Op::Div, a, weak(a, b), nullptr); }
Tensor operator+(double a, const Tensor& b) { return binary("add", Op::Add, weak(b, a), b, nullptr); }
Tensor operator-(double a, const Tensor& b) { return binary("sub", Op::Sub, weak(b, a), b, nullptr); }
Tensor operator*(double a, const Tensor& b) { return binary("mul", Op::Mul, weak(b, a), b, nullptr); }
Tensor operator/(double a, const Tensor& b) { return binary("div", Op::Div, weak(b, a), b, nullptr); }
Tensor operator<(const Tensor& a, const Tensor& b) { return binary("lt", Op::Lt, a, b, nullptr); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return binary("le", Op::Le, a, b, nullptr); }
Tensor operator>(const Tensor& a, const Tensor& b) { return binary("gt", Op::Gt, a, b, nullptr); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return binary("ge", Op::Ge, a, b, nullptr); }
Tensor operator<(const Tensor& a, double b) { return binary("lt", Op::Lt, a, weak(a, b), nullptr); }
Tensor operator>(const Tensor& a, double b) { return binary("gt", Op::Gt, a, weak(a, b), nullptr); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return binary("logical_and", Op::LogicalAnd, a, b, nullptr); }
Tensor operator||(const Tensor& a, const Tensor& b) { return binary("logical_or", Op::LogicalOr, a, b, nullptr); }
Tensor operator!(const Tensor& a) { return unary("logical_not", Op::LogicalNot, a, nullptr); }

}  // namespace fjit
