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


// Fused attention, packed [out | lse] over [B, H, Tq, dv + 1] (core/trace/attention.h), from
// its definition: with S = scale q k^T over the keys row i sees (the first min(length,
// i + Tk - Tq + 1) when causal) and P = exp(S - lse) there (0 elsewhere),
//   dS = scale (dq k^T + q dk^T),  dlse = rowsum(P dS),  dout = (P (dS - dlse)) v + P dv.
// A row that sees no key (out 0, lse -inf) has a zero tangent. bf16 q, k, v (the
// mixed-precision policy) have f32 tangents and an f32 result: the tangent is this formula in
// f32 on their values, widened (exactly).
Tans jvp_attention(const JvpArgs& a) {
  auto widened = [](const Tensor& x) { return x.dtype() == DType::bf16 ? cast(x, DType::f32) : x; };
  const Tensor q = widened(a.ins[0]), k = widened(a.ins[1]), v = widened(a.ins[2]);
  const Shape qs = q.shape(), ks = k.shape(), vs = v.shape();
  const int64_t b = qs[0], h = qs[1], tq = qs[2], tk = ks[2], dv = vs[3];
  const double scale = a.node.attrs.scalar;
  const DType t = q.dtype();
  Tensor sees;  // bool, broadcastable to [B, H, Tq, Tk]; undefined: every key
  const Tensor j = iota(DType::i32, {tq, tk}, 1);
  if (a.node.attrs.index != 0) sees = lt(j, iota(DType::i32, {tq, tk}, 0) + static_cast<double>(tk - tq + 1));
  if (a.ins.size() > 3) {
    Tensor by_length = lt(reshape(j, {1, 1, tq, tk}), reshape(a.ins[3], {b, 1, 1, 1}));
    sees = sees.defined() ? logical_and(reshape(sees, {1, 1, tq, tk}), by_length) : by_length;
  }
  Tensor lse = slice(a.out, {0, 0, 0, dv}, {b, h, tq, dv + 1});
  lse = where(isfinite(lse), lse, scalar(t, 0.0));
  Tensor p = exp(matmul(q, k, false, true) * scale - lse);
  if (sees.defined()) p = where(sees, p, scalar(t, 0.0));
  Tensor ds;
  if (a.tans[0].defined()) ds = matmul(a.tans[0], k, false, true);
  if (a.tans[1].defined()) {
    Tensor d = matmul(q, a.tans[1], false, true);
    ds = ds.defined() ? add(ds, d) : d;
  }
  Tensor dlse = full(t, {b, h, tq, 1}, 0.0), dout = full(t, {b, h, tq, dv}, 0.0);
  if (ds.defined()) {
    ds = ds * scale;
    dlse = sum(mul(p, ds), {3}, true);
    dout = matmul(mul(p, ds - dlse), v);
  }
  if (a.tans[2].defined()) dout = add(dout, matmul(p, a.tans[2]));
  return {concat({dout, dlse}, 3)};
}
// Its backward op has no forward-mode rule: an error naming the op rather than a silently
// zero tangent (a second derivative through fused attention).
Tans jvp_attention_grad(const JvpArgs& a) {
  detail::fail("dot_product_attention", {a.ins[0], a.ins[1], a.ins[2]},
               "second derivatives through fused attention are not implemented (forward over "
               "reverse included: differentiate the composed attention instead)",
               nullptr);
}

}  // namespace fjit::autodiff
