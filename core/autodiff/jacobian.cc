// jacfwd / jacrev helpers (core/autodiff/jacobian.h).
#include "core/autodiff/jacobian.h"

#include <fmt/format.h>

#include <string>

#include "core/autodiff/vmap.h"

namespace fjit::detail {

void require_jacobian_operand(const Tensor& x, const char* api, const Loc& loc) {
  if (!x.defined() || x.context() != TraceContext::current())
    fail(api, {}, "the argument is not a value of the active trace", &loc);
  if (!is_floating(x.dtype()))
    fail(api, {x}, "can only differentiate with respect to a floating-point argument, got " + x.type_string(), &loc);
}

void require_jacobian_operands(const std::vector<Tensor>& xs, const char* api, const Loc& loc) {
  if (xs.empty()) fail(api, {}, "needs at least one argument leaf to differentiate with respect to", &loc);
  for (const Tensor& x : xs) require_jacobian_operand(x, api, loc);
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

std::vector<Tensor> jacobian_blocks(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                                    const LinearLeaves& linear, bool forward, const char* api,
                                    const Loc& loc) {
  for (const Tensor& y : ys)
    if (!y.defined() || (!forward && !is_floating(y.dtype())))
      fail(api, {}, "the function must return floating-point Tensors, got " +
                        (y.defined() ? y.type_string() : std::string("an undefined Tensor")), &loc);
  // The basis walks the elements of `side` (xs forward, ys reverse): identity columns
  // [off, off + n) of an order-`total` identity for each leaf.
  const std::vector<Tensor>& side = forward ? xs : ys;
  std::vector<int64_t> offs;
  int64_t total = 0;
  for (const Tensor& t : side) {
    offs.push_back(total);
    total += t.size();
  }
  std::vector<Tensor> blocks;
  if (total == 0) {
    for (const Tensor& y : ys)
      for (const Tensor& x : xs) {
        Shape s = y.shape();
        const Shape xs_shape = x.shape();
        s.insert(s.end(), xs_shape.begin(), xs_shape.end());
        blocks.push_back(full(autodiff::tangent_dtype(forward ? x.dtype() : y.dtype()), s, 0.0));
      }
    return blocks;
  }
  std::vector<VmapLeaf> basis;
  for (size_t k = 0; k < side.size(); ++k) {
    const int64_t n = side[k].size();
    const Tensor hit = eq(iota(DType::i32, {total, n}, 0),
                          iota(DType::i32, {total, n}, 1) + scalar(DType::i32, static_cast<double>(offs[k])));
    const Shape leaf = side[k].shape();
    Shape s{total};
    s.insert(s.end(), leaf.begin(), leaf.end());
    const DType t = autodiff::tangent_dtype(side[k].dtype());
    basis.push_back({reshape(where(hit, scalar(t, 1.0), scalar(t, 0.0)), s), 0, fmt::format("basis{}", k)});
  }
  // forward: outs[i] = [total, ...ys[i]]; reverse: outs[j] = [total, ...xs[j]].
  const std::vector<Tensor> outs =
      vmap_flat(linear, basis, [](size_t n) { return std::vector<int>(n, 0); }, loc);
  for (size_t i = 0; i < ys.size(); ++i)
    for (size_t j = 0; j < xs.size(); ++j) {
      const int64_t m = ys[i].size(), n = xs[j].size();
      Tensor b;
      if (forward) {
        const int64_t o = offs[j];
        b = transpose(slice(reshape(outs[i], {total, m}), {o, 0}, {o + n, m}));
      } else {
        const int64_t o = offs[i];
        b = slice(reshape(outs[j], {total, n}), {o, 0}, {o + m, n});
      }
      Shape s = ys[i].shape();
      const Shape x_shape = xs[j].shape();
      s.insert(s.end(), x_shape.begin(), x_shape.end());
      blocks.push_back(reshape(b, s));
    }
  return blocks;
}

}  // namespace fjit::detail
