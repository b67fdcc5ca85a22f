// JVP rules of reductions, layout, indexing, the fused ops and collectives (see
// jvp_rules_elementwise.cc). Ops linear in operand 0 (jvp column `linear`: sum, reshape,
// transpose, broadcast_to, slice, patches, patches_adjoint, cumsum, gather, scatter_add) share
// one rule: the same op, with the same attributes and the other (integer) operands, applied to
// the tangent (patches padding with zero: its padding value is a constant).
#include "core/autodiff/jvp.h"
#include "core/trace/collectives.h"

namespace fjit::autodiff {
using Tans = std::vector<Tensor>;

Tans jvp_linear(const JvpArgs& a) {
  std::vector<Tensor> ins = a.ins;
  ins[0] = a.tans[0];
  const ValueType hint{a.tans[0].dtype(), a.out.shape()};
  Attrs at = a.node.attrs;
  // patches pads with a constant (max pooling's -inf): the constant's tangent is zero.
  if (a.node.op == Op::Patches) at.scalar = 0;
  return {detail::build(op_name(a.node.op), a.node.op, ins, std::move(at), hint, nullptr)};
}

Tans jvp_concat(const JvpArgs& a) {
  std::vector<Tensor> ts;
  for (size_t i = 0; i < a.ins.size(); ++i) {
    const Shape s = a.ins[i].shape();
    ts.push_back(a.tans[i].defined() ? a.tans[i] : full(tangent_dtype(a.ins[i].dtype()), s, 0.0));
  }
  return {concat(ts, a.node.attrs.axis)};
}

// The tangent of the elements equal to the extremum, averaged over ties (the VJP splits the
// cotangent equally among them).
Tans jvp_reduce_extremum(const JvpArgs& a) {
  const Tensor& x = a.ins[0];
  const Node& n = a.node;
  Shape ks = x.shape();
  for (int64_t ax : n.attrs.axes) ks[ax] = 1;
  const Shape out_shape = a.out.shape();
  Tensor mask = where(eq(x, reshape(a.out, ks)), scalar(x.dtype(), 1.0), scalar(x.dtype(), 0.0));
  Tensor t = div(sum(mul(mask, a.tans[0]), n.attrs.axes, true), sum(mask, n.attrs.axes, true));
  return {reshape(t, out_shape)};
}

// d xent = <softmax(logits) - onehot(label), d logits> over the last axis; a row whose label
// is out of range scores 0 and has a zero tangent (its gradient op row is zero).
Tans jvp_softmax_xent(const JvpArgs& a) {
  const Tensor &logits = a.ins[0], &labels = a.ins[1];
  const Shape ls = logits.shape(), os = a.out.shape();
  Attrs at;
  at.axis = a.node.attrs.axis;
  const Tensor g = detail::build("softmax_xent_grad", Op::SoftmaxXentGrad,
                                 {logits, labels, full(logits.dtype(), os, 1.0)}, std::move(at),
                                 ValueType{logits.dtype(), ls}, nullptr);
  return {sum(mul(g, a.tans[0]), {static_cast<int64_t>(ls.size()) - 1})};
}

// A sum over replicas is linear; a max or min takes the tangent of the replicas that hold the
// extremum, averaged over ties (as the VJP splits the cotangent).
Tans jvp_all_reduce(const JvpArgs& a) {
  const std::string& axis = a.node.attrs.name;
  const auto op = static_cast<ReduceOp>(a.node.attrs.reduce);
  if (op == ReduceOp::sum) return {psum(a.tans[0], axis)};
  const Tensor& x = a.ins[0];
  Tensor mask = where(eq(x, a.out), scalar(x.dtype(), 1.0), scalar(x.dtype(), 0.0));
  return {div(psum(mul(mask, a.tans[0]), axis), psum(mask, axis))};
}

Tans jvp_all_gather(const JvpArgs& a) { return {all_gather(a.tans[0], a.node.attrs.name)}; }

// Forward mode through fused attention is not implemented: an error naming the op rather
// than a silently zero tangent.
Tans jvp_attention(const JvpArgs& a) {
  detail::fail("dot_product_attention", {a.ins[0], a.ins[1], a.ins[2]},
               "forward-mode differentiation (jvp, jacfwd, hessian, hvp) through fused attention "
               "is not implemented (differentiate the composed attention instead)",
               nullptr);
}
Tans jvp_attention_grad(const JvpArgs& a) {
  detail::fail("dot_product_attention", {a.ins[0], a.ins[1], a.ins[2]},
               "second derivatives through fused attention are not implemented (differentiate "
               "the composed attention instead)",
               nullptr);
}

}  // namespace fjit::autodiff
