// jacfwd / jacrev helpers (core/autodiff/jacobian.h).
#include "core/autodiff/jacobian.h"

#include <string>

namespace fjit::detail {

void require_jacobian_operand(const Tensor& x, const char* api, const Loc& loc) {
  if (!x.defined() || x.context() != TraceContext::current())
    fail(api, {}, "the argument is not a value of the active trace", &loc);
  if (!is_floating(x.dtype()))
    fail(api, {x}, "can only differentiate with respect to a floating-point argument, got " + x.type_string(), &loc);
}

Tensor basis_vector(DType t, const Shape& shape, int64_t i) {
  const int64_t n = num_elements(shape);
  return reshape(where(eq(iota(DType::i32, {n}), scalar(DType::i32, static_cast<double>(i))),
                       scalar(t, 1.0), scalar(t, 0.0)),
                 shape);
}

Tensor stack_jacobian(const std::vector<Tensor>& parts, const Shape& out_shape, const Shape& in_shape,
                      bool parts_are_columns) {
  const int64_t m = num_elements(out_shape), n = num_elements(in_shape);
  Shape full_shape = out_shape;
  full_shape.insert(full_shape.end(), in_shape.begin(), in_shape.end());
  std::vector<Tensor> flat;
  for (const Tensor& p : parts) flat.push_back(reshape(p, parts_are_columns ? Shape{m, 1} : Shape{1, n}));
  if (flat.empty()) return full(DType::f32, full_shape, 0.0);
  return reshape(concat(flat, parts_are_columns ? 1 : 0), full_shape);
}

Tensor jacobian_rev(const Tensor& y, const Tensor& x, const Loc& loc) {
  if (!y.defined() || !is_floating(y.dtype()))
    fail("jacrev", {y}, "the function must return a floating-point Tensor, got " +
                            (y.defined() ? y.type_string() : std::string("an undefined Tensor")), &loc);
  const Shape ys = y.shape(), xs = x.shape();
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < y.size(); ++i)
    rows.push_back(vjp_many({y}, {basis_vector(y.dtype(), ys, i)}, {x}, loc)[0]);
  return stack_jacobian(rows, ys, xs, false);
}

}  // namespace fjit::detail
