// The VJP of fused attention (core/trace/attention.h): one attention_grad op over the packed
// forward result and its cotangent, whose flat [B, H, Tq*dh + Tk*dh + Tk*dv] result is sliced
// into dq, dk and dv. attention_grad itself has no VJP: differentiating it is an error.
#include "core/autodiff/autodiff.h"

namespace fjit::autodiff {

std::vector<Tensor> rule_attention(const VjpArgs& a) {
  std::vector<Tensor> ins{a.ins[0], a.ins[1], a.ins[2], a.out, a.ct};
  if (a.ins.size() > 3) ins.push_back(a.ins[3]);
  const Shape qs = a.ins[0].shape(), ks = a.ins[1].shape(), vs = a.ins[2].shape();
  const int64_t b = qs[0], h = qs[1], tq = qs[2], dh = qs[3], tk = ks[2], dv = vs[3];
  Attrs at;
  at.index = a.node.attrs.index;
  at.scalar = a.node.attrs.scalar;
  const Tensor g = detail::build("attention_grad", Op::AttentionGrad, ins, std::move(at),
                                 {a.ct.dtype(), {}}, nullptr);
  auto piece = [&](int64_t begin, int64_t rows, int64_t cols) {
    return reshape(slice(g, {0, 0, begin}, {b, h, begin + rows * cols}), {b, h, rows, cols});
  };
  std::vector<Tensor> cts{piece(0, tq, dh), piece(tq * dh, tk, dh), piece(tq * dh + tk * dh, tk, dv)};
  if (a.ins.size() > 3) cts.emplace_back();  // key lengths: integers, no cotangent
  return cts;
}

// Differentiating the backward op (a second derivative through attention) is not implemented:
// an error naming the op, where an op without a rule would silently pass no cotangent on.
std::vector<Tensor> rule_attention_grad(const VjpArgs& a) {
  detail::fail("dot_product_attention", {a.ins[0], a.ins[1], a.ins[2]},
               "second derivatives through fused attention are not implemented (differentiate "
               "the composed attention instead)",
               nullptr);
}

}  // namespace fjit::autodiff
