// VJP rules of the elementwise ops and matmul: rule_<vjp> for each row of core/ir/ops.def
// whose vjp column names it (core/autodiff/rule_table.cc collects them), each written with
// the public Tensor ops so that a gradient is an ordinary graph. Reductions, layout, indexing
// and collectives are in rules_structural.cc.
//
// Rules only build what `need` asks for, and express matmul gradients as matmuls with
// transpose flags, never materializing a transpose.
#include <functional>
#include <stdexcept>

#include "core/autodiff/autodiff.h"

namespace fjit::autodiff {

Tensor unbroadcast(const Tensor& ct, Shape shape) {
  if (ct.shape() == shape) return ct;
  const int lead = ct.rank() - static_cast<int>(shape.size());
  Axes axes;
  for (int d = 0; d < ct.rank(); ++d)
    if (d < lead || (shape[d - lead] == 1 && ct.shape()[d] != 1)) axes.push_back(d);
  Tensor s = axes.empty() ? ct : sum(ct, axes);
  return reshape(s, shape);
}

using Cts = std::vector<Tensor>;

namespace {

// Scalars broadcast inside the elementwise kernels; a zeros_like would be a full-size
// constant buffer read by every run.
Tensor zero(const Tensor& like) { return scalar(like.dtype(), 0.0); }
Tensor one(const Tensor& like) { return scalar(like.dtype(), 1.0); }

// Cotangent of a broadcasting binary op's inputs from their elementwise partials.
Cts binary_cts(const VjpArgs& a, const std::function<Tensor()>& da, const std::function<Tensor()>& db) {
  Cts r(2);
  if (a.need[0]) r[0] = unbroadcast(da(), a.ins[0].shape());
  if (a.need[1]) r[1] = unbroadcast(db(), a.ins[1].shape());
  return r;
}

}  // namespace

Cts rule_neg(const VjpArgs& a) { return {neg(a.ct)}; }
// abs'(0) = sign(0) = 0: the subgradient of least norm.
Cts rule_abs(const VjpArgs& a) { return {mul(a.ct, sign(a.ins[0]))}; }
Cts rule_exp(const VjpArgs& a) { return {mul(a.ct, a.out)}; }
Cts rule_log(const VjpArgs& a) { return {div(a.ct, a.ins[0])}; }
Cts rule_log1p(const VjpArgs& a) { return {div(a.ct, a.ins[0] + 1.0)}; }
Cts rule_sqrt(const VjpArgs& a) { return {div(a.ct * 0.5, a.out)}; }
// d/dx x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3, from the output so no pow is needed.
Cts rule_rsqrt(const VjpArgs& a) { return {mul(a.ct * -0.5, a.out * a.out * a.out)}; }
Cts rule_tanh(const VjpArgs& a) { return {mul(a.ct, 1.0 - a.out * a.out)}; }
Cts rule_sin(const VjpArgs& a) { return {mul(a.ct, cos(a.ins[0]))}; }
Cts rule_cos(const VjpArgs& a) { return {mul(a.ct, neg(sin(a.ins[0])))}; }
// erf'(x) = 2/sqrt(pi) exp(-x^2)
Cts rule_erf(const VjpArgs& a) {
  const Tensor& x = a.ins[0];
  return {mul(a.ct, exp(neg(x * x)) * 1.1283791670955126)};
}
Cts rule_gelu(const VjpArgs& a) { return {mul(a.ct, gelu_exact_grad(a.ins[0]))}; }
// gelu''(x) = phi(x) (2 - x^2)
Cts rule_gelu_grad(const VjpArgs& a) {
  const Tensor& x = a.ins[0];
  return {mul(a.ct, exp(x * x * -0.5) * 0.3989422804014327 * (2.0 - x * x))};
}
Cts rule_sigmoid(const VjpArgs& a) { return {mul(a.ct, a.out * (1.0 - a.out))}; }
// relu'(0) = 0, as in JAX and PyTorch. The mask comes from the output (y > 0 iff x > 0), so
// the pre-activation need not stay alive for the backward pass and relu can run in place.
Cts rule_relu(const VjpArgs& a) { return {where(a.out > 0.0, a.ct, zero(a.ct))}; }
// Float-to-float casts cast the cotangent back; casts to or from integers carry none.
// A bf16 operand or result (the mixed-precision policy's casts) has an f32 cotangent
// (autodiff.cc): the cast to or from bf16 passes it on as it is.
Cts rule_cast(const VjpArgs& a) {
  auto carries = [](DType t) { return is_floating(t) || t == DType::bf16; };
  if (!carries(a.ins[0].dtype()) || !carries(a.out.dtype())) return {Tensor()};
  const DType ct = a.ins[0].dtype() == DType::bf16 ? DType::f32 : a.ins[0].dtype();
  return {a.ct.dtype() == ct ? a.ct : cast(a.ct, ct)};
}

Cts rule_add(const VjpArgs& a) {
  return binary_cts(a, [&] { return a.ct; }, [&] { return a.ct; });
}
Cts rule_sub(const VjpArgs& a) {
  return binary_cts(a, [&] { return a.ct; }, [&] { return neg(a.ct); });
}
Cts rule_mul(const VjpArgs& a) {
  return binary_cts(a, [&] { return mul(a.ct, a.ins[1]); }, [&] { return mul(a.ct, a.ins[0]); });
}
// d(a/b)/db = -a/b^2 = -y/b: from the output, so b^2 cannot overflow.
Cts rule_div(const VjpArgs& a) {
  return binary_cts(a, [&] { return div(a.ct, a.ins[1]); },
                    [&] { return neg(div(mul(a.ct, a.out), a.ins[1])); });
}
// d(a^b)/da = b a^(b-1), taken as 0 where b == 0 (so 0^0 has gradient 0, not 0*inf);
// d(a^b)/db = a^b log a, taken as 0 where a <= 0 (real only for a > 0; the inner where keeps
// log away from non-positive values so no NaN is produced even in the untaken branch).
Cts rule_pow(const VjpArgs& a) {
  const Tensor &x = a.ins[0], &p = a.ins[1];
  return binary_cts(
      a,
      [&] {
        Tensor d = mul(p, pow(x, p - 1.0));
        return mul(a.ct, where(eq(p, zero(p)), zero(d), d));
      },
      [&] {
        Tensor pos = x > 0.0;
        Tensor safe = where(pos, x, one(x));
        Tensor d = mul(a.out, log(safe));
        return mul(a.ct, where(pos, d, zero(d)));
      });
}
// Ties split the cotangent equally: the mean of the one-sided derivatives, which is what
// central differences measure.
static Cts extremum(const VjpArgs& a, bool is_max) {
  const Tensor &x = a.ins[0], &y = a.ins[1];
  Tensor wins = is_max ? x > y : lt(x, y);
  const DType t = a.ct.dtype();
  Tensor wx = where(wins, scalar(t, 1.0), where(eq(x, y), scalar(t, 0.5), scalar(t, 0.0)));
  return binary_cts(a, [&] { return mul(a.ct, wx); }, [&] { return mul(a.ct, 1.0 - wx); });
}
Cts rule_maximum(const VjpArgs& a) { return extremum(a, true); }
Cts rule_minimum(const VjpArgs& a) { return extremum(a, false); }

Cts rule_select(const VjpArgs& a) {
  Cts r(3);
  const Tensor& c = a.ins[0];
  if (a.need[1]) r[1] = unbroadcast(where(c, a.ct, zero(a.ct)), a.ins[1].shape());
  if (a.need[2]) r[2] = unbroadcast(where(c, zero(a.ct), a.ct), a.ins[2].shape());
  return r;
}

// C = op(A) op(B) with op = transpose when the flag is set. With G the cotangent of C:
//   d op(A) = G op(B)^T   and   d op(B) = op(A)^T G,
// and a transposed operand takes the transpose of that, folded into the flags again.
// A rank-2 operand broadcast over the other's batch receives the batch-summed gradient; for
// the common x[..., M, K] @ w[K, N] that is one GEMM over the flattened batch rows.
// bf16 operands (an f32 result): the cotangent is rounded to bf16 and both products run on
// bf16 operands too, with f32 results, the operands' f32 cotangents (autodiff.cc).
Cts rule_matmul(const VjpArgs& a) {
  const Tensor &A = a.ins[0], &B = a.ins[1];
  const Tensor G = A.dtype() == DType::bf16 ? cast(a.ct, DType::bf16) : a.ct;
  const bool ta = a.node.attrs.trans_a, tb = a.node.attrs.trans_b;
  const bool bf16 = A.dtype() == DType::bf16;
  auto matmul = [bf16](const Tensor& x, const Tensor& y, bool tx, bool ty) {
    return bf16 ? fjit::matmul(x, y, DType::f32, tx, ty) : fjit::matmul(x, y, tx, ty);
  };
  Cts r(2);
  if (a.need[0]) {
    Tensor dA = ta ? matmul(B, G, tb, true) : matmul(G, B, false, !tb);
    r[0] = unbroadcast(dA, A.shape());
  }
  if (a.need[1]) {
    if (B.rank() == 2 && A.rank() > 2 && !ta) {
      const int64_t k = A.shape().back(), n = G.shape().back();
      Tensor A2 = reshape(A, {-1, k}), G2 = reshape(G, {-1, n});
      r[1] = tb ? matmul(G2, A2, true, false) : matmul(A2, G2, true, false);
    } else {
      Tensor dB = tb ? matmul(G, A, true, ta) : matmul(A, G, !ta, false);
      r[1] = unbroadcast(dB, B.shape());
    }
  }
  return r;
}

// Sources have no inputs; the walk treats them as leaves.
Cts rule_source(const VjpArgs&) { return {}; }

}  // namespace fjit::autodiff
