// Reference kernels for matmul, reductions and argmax: plain loops, accumulating in double.
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/ir/shape_rules.h"
#include "core/kernels/structural/structural.h"
#include "core/kernels/structural/structural_reference.h"

namespace fjit::kernels::st {
namespace {
using ref::get;
using ref::ravel;
using ref::set;
using ref::unravel;

void matmul(const Attrs& at, const ValueType& out, const Array& a, const Array& b, Array& result) {
  const Shape &as = a.shape(), &bs = b.shape(), &cs = out.shape;
  const size_t r = cs.size();
  const int64_t k_extent = at.trans_a ? as[as.size() - 2] : as.back();
  for (int64_t i = 0; i < result.size(); ++i) {
    const std::vector<int64_t> c = unravel(i, cs);
    const int64_t m = c[r - 2], n = c[r - 1];
    // Batch indices are the leading out indices; a rank-2 operand has none.
    std::vector<int64_t> ai(c.begin(), c.end() - 2), bi(c.begin(), c.end() - 2);
    if (as.size() == 2) ai.clear();
    if (bs.size() == 2) bi.clear();
    ai.resize(ai.size() + 2);
    bi.resize(bi.size() + 2);
    double acc = 0;
    for (int64_t k = 0; k < k_extent; ++k) {
      ai[ai.size() - 2] = at.trans_a ? k : m;
      ai[ai.size() - 1] = at.trans_a ? m : k;
      bi[bi.size() - 2] = at.trans_b ? n : k;
      bi[bi.size() - 1] = at.trans_b ? k : n;
      acc += get(a, ravel(ai, as)) * get(b, ravel(bi, bs));
    }
    set(result, i, acc);
  }
}

double identity(Op op, DType t) {
  const double inf = std::numeric_limits<double>::infinity();
  switch (op) {
    case Op::ReduceMax:
      return t == DType::i32 ? static_cast<double>(std::numeric_limits<int32_t>::min()) : -inf;
    case Op::ReduceMin:
      return t == DType::i32 ? static_cast<double>(std::numeric_limits<int32_t>::max()) : inf;
    case Op::ReduceAll: return 1;
    default: return 0;  // sum, any
  }
}

double combine(Op op, double acc, double v) {
  switch (op) {
    case Op::ReduceSum: return acc + v;
    case Op::ReduceMax:
      if (std::isnan(acc)) return acc;
      return (std::isnan(v) || v > acc) ? v : acc;
    case Op::ReduceMin:
      if (std::isnan(acc)) return acc;
      return (std::isnan(v) || v < acc) ? v : acc;
    case Op::ReduceAll: return (acc != 0 && v != 0) ? 1 : 0;
    case Op::ReduceAny: return (acc != 0 || v != 0) ? 1 : 0;
    default: return acc;
  }
}

bool is_reduced(const Attrs& at, size_t d) {
  for (int64_t a : at.axes)
    if (a == static_cast<int64_t>(d)) return true;
  return false;
}

// Visits every input element once and folds it into its output element.
void reduce(Op op, const Attrs& at, const ValueType& out, const Array& x, Array& result) {
  std::vector<double> acc(result.size(), identity(op, out.dtype));
  const Shape& xs = x.shape();
  for (int64_t i = 0; i < x.size(); ++i) {
    const std::vector<int64_t> xi = unravel(i, xs);
    std::vector<int64_t> oi;
    for (size_t d = 0; d < xs.size(); ++d) {
      if (!is_reduced(at, d)) oi.push_back(xi[d]);
      else if (at.keepdims) oi.push_back(0);
    }
    const int64_t o = ravel(oi, out.shape);
    acc[o] = combine(op, acc[o], get(x, i));
  }
  for (int64_t o = 0; o < result.size(); ++o) set(result, o, acc[o]);
}

// argmax (max) or argmin (!max): the first extreme, a NaN being the most extreme.
void arg_extreme(bool max, const Attrs& at, const ValueType& out, const Array& x, Array& result) {
  const Shape& xs = x.shape();
  const size_t axis = static_cast<size_t>(at.axis);
  for (int64_t o = 0; o < result.size(); ++o) {
    std::vector<int64_t> oi = unravel(o, out.shape);
    // The input index: the output index with the axis put back (or reset, with keepdims).
    std::vector<int64_t> xi = oi;
    if (!at.keepdims) xi.insert(xi.begin() + axis, 0);
    int64_t best = -1;
    double best_value = 0;
    for (int64_t k = 0; k < xs[axis]; ++k) {
      xi[axis] = k;
      const double v = get(x, ravel(xi, xs));
      if (best < 0) {
        best = k;
        best_value = v;
      } else if (!std::isnan(best_value) &&
                 (std::isnan(v) || (max ? v > best_value : v < best_value))) {
        best = k;
        best_value = v;
      }
    }
    set(result, o, static_cast<double>(best < 0 ? 0 : best));
  }
}

// The patches' shape [N, OH, OW, KH*KW*C] of an image under attrs.window: patches' shape rule.
Shape patches_shape(const Attrs& attrs, const ValueType& image) {
  const ValueType ins[1] = {image};
  return infer_type(Op::Patches, attrs, ins, image).shape;
}

}  // namespace

bool reference_matmul_reduce(Op op, const Attrs& attrs, const ValueType& out,
                             std::span<const Array> ins, Array& result) {
  switch (op) {
    case Op::MatMul:
      assert(ins.size() == 2);
      if (!attrs.window.empty() && attrs.index == 1) {  // the product's patches_adjoint
        const Shape cs = patches_shape(attrs, out);
        Attrs plain = attrs;
        plain.window.clear();
        plain.index = 0;
        Array product(out.dtype, {cs[0] * cs[1] * cs[2], cs[3]});
        matmul(plain, {out.dtype, product.shape()}, ins[0], ins[1], product);
        Array cols(out.dtype, cs);
        std::memcpy(cols.raw(), product.raw(), product.nbytes());
        const Array one[1] = {cols};
        return reference_patches(Op::PatchesAdjoint, attrs, one, result);
      }
      if (!attrs.window.empty()) {  // operand 0 an image, op(A) its patches (patches_gemm.h)
        const Shape cs = patches_shape(attrs, {ins[0].dtype(), ins[0].shape()});
        Array cols(ins[0].dtype(), cs);
        reference_patches(Op::Patches, attrs, ins.subspan(0, 1), cols);
        Array a(ins[0].dtype(), {cs[0] * cs[1] * cs[2], cs[3]});
        std::memcpy(a.raw(), cols.raw(), cols.nbytes());
        matmul(attrs, out, a, ins[1], result);
        return true;
      }
      matmul(attrs, out, ins[0], ins[1], result);
      return true;
    case Op::ReduceSum: case Op::ReduceMax: case Op::ReduceMin: case Op::ReduceAll:
    case Op::ReduceAny:
      assert(ins.size() == 1);
      reduce(op, attrs, out, ins[0], result);
      return true;
    case Op::ArgMax: case Op::ArgMin:
      assert(ins.size() == 1);
      arg_extreme(op == Op::ArgMax, attrs, out, ins[0], result);
      return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
