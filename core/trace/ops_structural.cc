// Builders for matmul, reductions, layout and indexing ops (see core/trace/ops.h).
#include <algorithm>
#include <climits>

#include "core/trace/ops.h"

namespace fjit {
namespace {
ValueType no_hint() { return {DType::f32, {}}; }

int64_t norm_axis(const char* name, const Tensor& x, int64_t axis, int extra, const Loc& loc) {
  const int64_t r = x.rank() + extra;
  if (axis < -r || axis >= r)
    detail::fail(name, {x}, "axis " + std::to_string(axis) + " is out of range for rank " +
                 std::to_string(x.rank()), &loc);
  return axis < 0 ? axis + r : axis;
}

Axes norm_axes(const char* name, const Tensor& x, Axes axes, const Loc& loc) {
  if (!x.defined()) detail::fail(name, {}, "operand is an undefined Tensor", &loc);
  if (axes.empty())
    for (int d = 0; d < x.rank(); ++d) axes.push_back(d);
  for (int64_t& a : axes) a = norm_axis(name, x, a, 0, loc);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    detail::fail(name, {x}, "repeated axis", &loc);
  return axes;
}

bool is_half(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16);
}

Tensor reduce(const char* name, Op op, const Tensor& x, Axes axes, bool keepdims, const Loc& loc) {
  if (is_half(x) && op != Op::ReduceAll && op != Op::ReduceAny) {
    // Half-precision storage: accumulate in f32, round the result once.
    detail::CompositeScope scope(name, {x});
    return cast(reduce(name, op, cast(x, DType::f32, loc), std::move(axes), keepdims, loc),
                x.dtype(), loc);
  }
  Attrs a;
  a.axes = norm_axes(name, x, std::move(axes), loc);
  a.keepdims = keepdims;
  if (a.axes.empty()) return x;  // a rank-0 operand: nothing to reduce
  return detail::build(name, op, {x}, std::move(a), no_hint(), &loc);
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Loc loc) {
  if (is_half(a) && b.defined() && a.dtype() == b.dtype())
    return matmul(a, b, a.dtype(), trans_a, trans_b, loc);
  Attrs at;
  at.trans_a = trans_a;
  at.trans_b = trans_b;
  return detail::build("matmul", Op::MatMul, {a, b}, std::move(at), no_hint(), &loc);
}

Tensor matmul(const Tensor& a, const Tensor& b, DType result, bool trans_a, bool trans_b, Loc loc) {
  if (!is_half(a) || !b.defined() || a.dtype() != b.dtype()) {
    Tensor p = matmul(a, b, trans_a, trans_b, loc);
    if (p.dtype() != result)
      detail::fail("matmul", {a, b},
                   std::string("a result of dtype ") + dtype_name(result) + " needs f16 or bf16 operands",
                   &loc);
    return p;
  }
  if (result != DType::f32 && result != a.dtype())
    detail::fail("matmul", {a, b},
                 std::string("the result of a half-precision product is f32 or the operands' dtype, not ") +
                     dtype_name(result),
                 &loc);
  detail::CompositeScope scope("matmul", {a, b});
  Tensor p;
  if (a.dtype() == DType::bf16) {  // the op itself: bf16 products, f32 result
    Attrs at;
    at.trans_a = trans_a;
    at.trans_b = trans_b;
    p = detail::build("matmul", Op::MatMul, {a, b}, std::move(at), no_hint(), &loc);
  } else {  // f16: widened to f32 (exact), an f32 product
    p = matmul(cast(a, DType::f32, loc), cast(b, DType::f32, loc), trans_a, trans_b, loc);
  }
  return result == DType::f32 ? p : cast(p, result, loc);
}

Tensor sum(const Tensor& x, Axes axes, bool keepdims, Loc loc) {
  return reduce("sum", Op::ReduceSum, x, std::move(axes), keepdims, loc);
}
Tensor max(const Tensor& x, Axes axes, bool keepdims, Loc loc) {
  return reduce("max", Op::ReduceMax, x, std::move(axes), keepdims, loc);
}
Tensor min(const Tensor& x, Axes axes, bool keepdims, Loc loc) {
  return reduce("min", Op::ReduceMin, x, std::move(axes), keepdims, loc);
}
Tensor all(const Tensor& x, Axes axes, bool keepdims, Loc loc) {
  return reduce("all", Op::ReduceAll, x, std::move(axes), keepdims, loc);
}
Tensor any(const Tensor& x, Axes axes, bool keepdims, Loc loc) {
  return reduce("any", Op::ReduceAny, x, std::move(axes), keepdims, loc);
}
Tensor mean(const Tensor& x, Axes axes, bool keepdims, Loc loc) {
  Axes norm = norm_axes("mean", x, std::move(axes), loc);
  if (is_half(x)) {
    detail::CompositeScope scope("mean", {x});
    return cast(mean(cast(x, DType::f32, loc), norm, keepdims, loc), x.dtype(), loc);
  }
  if (!is_floating(x.dtype())) detail::fail("mean", {x}, "expects a floating-point operand", &loc);
  int64_t n = 1;
  for (int64_t a : norm) n *= x.shape()[a];
  Tensor s = reduce("mean", Op::ReduceSum, x, norm, keepdims, loc);
  return mul(s, scalar(x.dtype(), 1.0 / static_cast<double>(std::max<int64_t>(n, 1)), loc), loc);
}
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims, Loc loc) {
  Attrs a;
  a.axis = norm_axis("argmax", x, axis, 0, loc);
  a.keepdims = keepdims;
  return detail::build("argmax", Op::ArgMax, {x}, std::move(a), no_hint(), &loc);
}

Tensor argmin(const Tensor& x, int64_t axis, bool keepdims, Loc loc) {
  Attrs a;
  a.axis = norm_axis("argmin", x, axis, 0, loc);
  a.keepdims = keepdims;
  return detail::build("argmin", Op::ArgMin, {x}, std::move(a), no_hint(), &loc);
}

Tensor cumsum(const Tensor& x, int axis, bool reverse, Loc loc) {
  if (is_half(x)) {
    detail::CompositeScope scope("cumsum", {x});
    return cast(cumsum(cast(x, DType::f32, loc), axis, reverse, loc), x.dtype(), loc);
  }
  if (!x.defined()) detail::fail("cumsum", {}, "operand is an undefined Tensor", &loc);
  Attrs a;
  a.axis = norm_axis("cumsum", x, axis, 0, loc);
  a.reverse = reverse;
  return detail::build("cumsum", Op::Cumsum, {x}, std::move(a), no_hint(), &loc);
}

std::pair<Tensor, Tensor> top_k(const Tensor& x, int64_t k, Loc loc) {
  if (!x.defined()) detail::fail("top_k", {}, "operand is an undefined Tensor", &loc);
  if (x.rank() == 0) detail::fail("top_k", {x}, "needs an operand of rank >= 1", &loc);
  const Shape shape = x.shape();  // a copy: building ops grows the node list
  const int64_t n = shape.back();
  if (k < 0 || k > n)
    detail::fail("top_k", {x}, "k = " + std::to_string(k) + " is outside [0, " + std::to_string(n) +
                 "] (the last axis' extent)", &loc);
  Attrs a;
  a.axis = x.rank() - 1;
  a.index = k;
  const Tensor indices = detail::build("top_k", Op::TopK, {x}, std::move(a), no_hint(), &loc);
  detail::CompositeScope scope("top_k", {x});
  if (x.rank() == 1) return {take(x, indices, 0, loc), indices};
  // The values: a gather of the flattened x at row * n + index, so that the cotangent reaches
  // x through gather's rule.
  const int64_t rows = x.size() / std::max<int64_t>(n, 1);
  if (x.size() > INT32_MAX)
    detail::fail("top_k", {x}, "supports operands of at most 2^31 - 1 elements", &loc);
  Shape out = shape;
  out.back() = k;
  const Tensor flat_idx = add(mul(iota(DType::i32, {rows, k}, 0, loc), scalar(DType::i32, static_cast<double>(n), loc), loc),
                              reshape(indices, {rows, k}, loc), loc);
  const Tensor values = reshape(take(reshape(x, {x.size()}, loc), flat_idx, 0, loc), out, loc);
  return {values, indices};
}

Tensor reshape(const Tensor& x, Shape shape, Loc loc) {
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) detail::fail("reshape", {x}, "more than one -1 in " + shape_str(shape), &loc);
      inferred = static_cast<int>(i);
    } else if (shape[i] < 0) {
      detail::fail("reshape", {x}, "negative extent in " + shape_str(shape), &loc);
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || x.size() % known != 0)
      detail::fail("reshape", {x}, "cannot infer -1 in " + shape_str(shape), &loc);
    shape[inferred] = x.size() / known;
  }
  if (x.defined() && shape == x.shape()) return x;
  return detail::build("reshape", Op::Reshape, {x}, {}, ValueType{DType::f32, shape}, &loc);
}

Tensor transpose(const Tensor& x, Axes perm, Loc loc) {
  if (!x.defined()) detail::fail("transpose", {}, "operand is an undefined Tensor", &loc);
  if (perm.empty())
    for (int d = x.rank() - 1; d >= 0; --d) perm.push_back(d);
  for (int64_t& p : perm)
    if (p < 0) p += x.rank();
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity && static_cast<int>(perm.size()) == x.rank()) return x;
  Attrs a;
  a.axes = std::move(perm);
  return detail::build("transpose", Op::Transpose, {x}, std::move(a), no_hint(), &loc);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape, Loc loc) {
  if (x.defined() && x.shape() == shape) return x;
  return detail::build("broadcast_to", Op::BroadcastTo, {x}, {}, ValueType{DType::f32, shape}, &loc);
}

Tensor expand_dims(const Tensor& x, int64_t axis, Loc loc) {
  axis = norm_axis("expand_dims", x, axis, 1, loc);
  Shape s = x.shape();
  s.insert(s.begin() + axis, 1);
  return reshape(x, s, loc);
}

Tensor squeeze(const Tensor& x, Axes axes, Loc loc) {
  if (!x.defined()) detail::fail("squeeze", {}, "operand is an undefined Tensor", &loc);
  Shape s;
  if (axes.empty()) {
    for (int64_t d : x.shape()) if (d != 1) s.push_back(d);
  } else {
    Axes norm = norm_axes("squeeze", x, axes, loc);
    for (int64_t a : norm)
      if (x.shape()[a] != 1)
        detail::fail("squeeze", {x}, "axis " + std::to_string(a) + " has extent " +
                     std::to_string(x.shape()[a]) + ", not 1", &loc);
    for (int d = 0; d < x.rank(); ++d)
      if (!std::binary_search(norm.begin(), norm.end(), d)) s.push_back(x.shape()[d]);
  }
  return reshape(x, s, loc);
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis, Loc loc) {
  if (xs.empty()) detail::fail("concat", {}, "needs at least one operand", &loc);
  if (xs.size() == 1) return xs[0];
  Attrs a;
  a.axis = norm_axis("concat", xs[0], axis, 0, loc);
  return detail::build("concat", Op::Concat, xs, std::move(a), no_hint(), &loc);
}

Tensor slice(const Tensor& x, Axes starts, Axes limits, Axes steps, Loc loc) {
  if (!x.defined()) detail::fail("slice", {}, "operand is an undefined Tensor", &loc);
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (static_cast<int>(starts.size()) != x.rank() || limits.size() != starts.size() ||
      steps.size() != starts.size())
    detail::fail("slice", {x}, "starts, limits and steps need one entry per dimension", &loc);
  for (int d = 0; d < x.rank(); ++d) {
    if (starts[d] < 0) starts[d] += x.shape()[d];
    if (limits[d] < 0) limits[d] += x.shape()[d];
  }
  Attrs a;
  a.starts = std::move(starts);
  a.limits = std::move(limits);
  a.steps = std::move(steps);
  return detail::build("slice", Op::Slice, {x}, std::move(a), no_hint(), &loc);
}

Tensor take(const Tensor& x, const Tensor& indices, int64_t axis, Loc loc) {
  Attrs a;
  a.axis = norm_axis("take", x, axis, 0, loc);
  return detail::build("take", Op::Gather, {x, indices}, std::move(a), no_hint(), &loc);
}
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis, Loc loc) {
  detail::CompositeScope scope("gather", {x, indices});
  return take(x, indices, axis, loc);
}

Tensor softmax_xent(const Tensor& logits, const Tensor& labels, Loc loc) {
  if (!logits.defined() || logits.rank() < 1)
    detail::fail("softmax_xent", {logits, labels}, "expects logits [..., V]", &loc);
  Attrs a;
  a.axis = logits.rank() - 1;
  return detail::build("softmax_xent", Op::SoftmaxXent, {logits, labels}, std::move(a), no_hint(), &loc);
}

Tensor scatter_add(const Tensor& updates, const Tensor& indices, const Shape& operand_shape,
                   int64_t axis, Loc loc) {
  Attrs a;
  const int64_t r = static_cast<int64_t>(operand_shape.size());
  if (axis < -r || axis >= r)
    detail::fail("scatter_add", {updates, indices}, "axis " + std::to_string(axis) + " out of range", &loc);
  a.axis = axis < 0 ? axis + r : axis;
  return detail::build("scatter_add", Op::ScatterAdd, {updates, indices}, std::move(a),
                       ValueType{updates.defined() ? updates.dtype() : DType::f32, operand_shape}, &loc);
}

}  // namespace fjit
