// JVP rules of the elementwise ops and matmul: jvp_<jvp> for each row of core/ir/ops.def
// whose jvp column names it (core/autodiff/jvp.cc collects them), written with the public
// Tensor ops. Each is the derivative its VJP rule (rules_elementwise.cc) transposes, with the
// same conventions at non-smooth points, so forward and reverse mode agree exactly.
// An undefined input tangent is zero; a rule returns its output's tangent, of the output's
// shape and tangent dtype.
#include "core/autodiff/jvp.h"

namespace fjit::autodiff {
using Tans = std::vector<Tensor>;

namespace {

Tensor zero(const Tensor& like) { return scalar(like.dtype(), 0.0); }

// a + b where either may be undefined (zero).
Tensor plus(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}

// The tangent `t` of a value of `out`'s shape (broadcasting one operand's tangent).
Tans fit(const Tensor& t, const Tensor& out) {
  const Shape s = out.shape();
  if (!t.defined()) return {Tensor()};
  return {t.shape() == s ? t : broadcast_to(t, s)};
}

const Tensor& t0(const JvpArgs& a) { return a.tans[0]; }

}  // namespace

Tans jvp_neg(const JvpArgs& a) { return {neg(t0(a))}; }
Tans jvp_abs(const JvpArgs& a) { return {mul(t0(a), sign(a.ins[0]))}; }
Tans jvp_exp(const JvpArgs& a) { return {mul(t0(a), a.out)}; }
Tans jvp_log(const JvpArgs& a) { return {div(t0(a), a.ins[0])}; }
Tans jvp_log1p(const JvpArgs& a) { return {div(t0(a), a.ins[0] + 1.0)}; }
Tans jvp_sqrt(const JvpArgs& a) { return {div(t0(a) * 0.5, a.out)}; }
Tans jvp_rsqrt(const JvpArgs& a) { return {mul(t0(a) * -0.5, a.out * a.out * a.out)}; }
Tans jvp_tanh(const JvpArgs& a) { return {mul(t0(a), 1.0 - a.out * a.out)}; }
Tans jvp_sin(const JvpArgs& a) { return {mul(t0(a), cos(a.ins[0]))}; }
Tans jvp_cos(const JvpArgs& a) { return {mul(t0(a), neg(sin(a.ins[0])))}; }
Tans jvp_erf(const JvpArgs& a) {
  const Tensor& x = a.ins[0];
  return {mul(t0(a), exp(neg(x * x)) * 1.1283791670955126)};
}
Tans jvp_gelu(const JvpArgs& a) { return {mul(t0(a), gelu_exact_grad(a.ins[0]))}; }
Tans jvp_gelu_grad(const JvpArgs& a) {
  const Tensor& x = a.ins[0];
  return {mul(t0(a), exp(x * x * -0.5) * 0.3989422804014327 * (2.0 - x * x))};
}
Tans jvp_sigmoid(const JvpArgs& a) { return {mul(t0(a), a.out * (1.0 - a.out))}; }
Tans jvp_relu(const JvpArgs& a) { return {where(a.out > 0.0, t0(a), zero(t0(a)))}; }
// Float-to-float casts cast the tangent; casts to or from integers carry none; a bf16 result
// has an f32 tangent.
Tans jvp_cast(const JvpArgs& a) {
  auto carries = [](DType t) { return is_floating(t) || t == DType::bf16; };
  if (!carries(a.ins[0].dtype()) || !carries(a.out.dtype())) return {Tensor()};
  const DType want = tangent_dtype(a.out.dtype());
  return {t0(a).dtype() == want ? t0(a) : cast(t0(a), want)};
}

Tans jvp_add(const JvpArgs& a) { return fit(plus(a.tans[0], a.tans[1]), a.out); }
Tans jvp_sub(const JvpArgs& a) {
  return fit(plus(a.tans[0], a.tans[1].defined() ? neg(a.tans[1]) : Tensor()), a.out);
}
Tans jvp_mul(const JvpArgs& a) {
  const Tensor &ta = a.tans[0], &tb = a.tans[1];
  return fit(plus(ta.defined() ? mul(ta, a.ins[1]) : Tensor(), tb.defined() ? mul(a.ins[0], tb) : Tensor()), a.out);
}
// d(a/b) = da/b - y db/b, from the output as the VJP does.
Tans jvp_div(const JvpArgs& a) {
  const Tensor &ta = a.tans[0], &tb = a.tans[1];
  return fit(plus(ta.defined() ? div(ta, a.ins[1]) : Tensor(),
                  tb.defined() ? neg(div(mul(a.out, tb), a.ins[1])) : Tensor()), a.out);
}
// The partials of the VJP rule: b a^(b-1) (0 where b == 0) and a^b log a (0 where a <= 0).
Tans jvp_pow(const JvpArgs& a) {
  const Tensor &x = a.ins[0], &p = a.ins[1], &ta = a.tans[0], &tb = a.tans[1];
  Tensor da, db;
  if (ta.defined()) {
    Tensor d = mul(p, pow(x, p - 1.0));
    da = mul(ta, where(eq(p, zero(p)), zero(d), d));
  }
  if (tb.defined()) {
    Tensor pos = x > 0.0;
    Tensor d = mul(a.out, log(where(pos, x, scalar(x.dtype(), 1.0))));
    db = mul(tb, where(pos, d, zero(d)));
  }
  return fit(plus(da, db), a.out);
}
// Ties weigh both tangents by one half, as the VJP splits the cotangent.
static Tans extremum(const JvpArgs& a, bool is_max) {
  const Tensor &x = a.ins[0], &y = a.ins[1], &tx = a.tans[0], &ty = a.tans[1];
  Tensor wins = is_max ? x > y : lt(x, y);
  const DType t = tangent_dtype(a.out.dtype());
  Tensor wx = where(wins, scalar(t, 1.0), where(eq(x, y), scalar(t, 0.5), scalar(t, 0.0)));
  return fit(plus(tx.defined() ? mul(tx, wx) : Tensor(), ty.defined() ? mul(ty, 1.0 - wx) : Tensor()), a.out);
}
Tans jvp_maximum(const JvpArgs& a) { return extremum(a, true); }
Tans jvp_minimum(const JvpArgs& a) { return extremum(a, false); }

Tans jvp_select(const JvpArgs& a) {
  const Tensor &ta = a.tans[1], &tb = a.tans[2];
  const Tensor z = scalar(tangent_dtype(a.out.dtype()), 0.0);
  return fit(where(a.ins[0], ta.defined() ? ta : z, tb.defined() ? tb : z), a.out);
}

// d(op(A) op(B)) = op(dA) op(B) + op(A) op(dB), with the node's transpose flags. bf16
// operands (an f32 result): the f32 tangents are rounded to bf16, as the VJP rounds the
// cotangent, and the products have f32 results.
Tans jvp_matmul(const JvpArgs& a) {
  const Tensor &A = a.ins[0], &B = a.ins[1];
  const bool ta = a.node.attrs.trans_a, tb = a.node.attrs.trans_b;
  const bool bf16 = A.dtype() == DType::bf16;
  auto mm = [&](const Tensor& x, const Tensor& y) {
    return bf16 ? matmul(x, y, DType::f32, ta, tb) : matmul(x, y, ta, tb);
  };
  auto round = [bf16](const Tensor& t) { return bf16 ? cast(t, DType::bf16) : t; };
  Tensor r = plus(a.tans[0].defined() ? mm(round(a.tans[0]), B) : Tensor(),
                  a.tans[1].defined() ? mm(A, round(a.tans[1])) : Tensor());
  return fit(r, a.out);
}

// Sources have no inputs: their tangents are given (parameters) or zero (constants).
Tans jvp_source(const JvpArgs&) { return {Tensor()}; }

}  // namespace fjit::autodiff
