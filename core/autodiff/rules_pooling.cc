// Reverse and forward rules of max pooling (core/trace/patches.h).
//
// max_pool's VJP is one max_pool_grad op. max_pool_grad is linear in its cotangent operand and
// piecewise constant in the image: its transpose (and max_pool's tangent) is, per window, the
// mean of a value over the elements equal to the window's max, written here with the window
// ops, as reduce_max's rules write it over one axis. The image gets no cotangent from
// max_pool_grad (zero almost everywhere, as for reduce_max's rule).
#include <limits>

#include "core/autodiff/autodiff.h"
#include "core/autodiff/jvp.h"

namespace fjit::autodiff {
namespace {

// Per window of x (the resolved window attribute `window`) and channel: the mean of t's
// window elements over those where x equals the window's max. Padding reads -inf in x and 0
// in t, so it counts only in a window whose max is -inf; a window whose max is NaN gives NaN.
Tensor tie_mean(const Tensor& t, const Tensor& x, const std::vector<int64_t>& window) {
  const Shape xs = x.shape();
  auto windows = [&](const Tensor& v, double pad) {
    Attrs at;
    at.window = window;
    at.scalar = pad;
    const Tensor cols = detail::build("patches", Op::Patches, {v}, std::move(at), {v.dtype(), {}}, nullptr);
    const Shape cs = cols.shape();
    return reshape(cols, {cs[0], cs[1], cs[2], window[0] * window[1], xs[3]});
  };
  Attrs at;
  at.window = window;
  const Tensor m = detail::build("max_pool", Op::MaxPool, {x}, std::move(at), {x.dtype(), {}}, nullptr);
  const Shape ms = m.shape();
  const Tensor hit = eq(windows(x, -std::numeric_limits<double>::infinity()),
                        reshape(m, {ms[0], ms[1], ms[2], 1, ms[3]}));
  const Tensor mask = where(hit, scalar(x.dtype(), 1.0), scalar(x.dtype(), 0.0));
  return div(sum(mul(mask, windows(t, 0.0)), {3}), sum(mask, {3}));
}

// max_pool_grad(ct, x) with the window and ReLU mask of `like`'s attributes.
Tensor grad_op(const Tensor& ct, const Tensor& x, const Attrs& like) {
  Attrs at;
  at.window = like.window;
  at.index = like.index;
  return detail::build("max_pool_grad", Op::MaxPoolGrad, {ct, x}, std::move(at), {x.dtype(), {}},
                       nullptr);
}

}  // namespace

std::vector<Tensor> rule_max_pool(const VjpArgs& a) {
  Attrs at;
  at.window = a.node.attrs.window;
  return {grad_op(a.ct, a.ins[0], at)};
}

// The ReLU mask (attrs.index 1, set by a compiler pass after differentiation) zeroes the
// cotangent of the masked pixels before it is averaged.
std::vector<Tensor> rule_max_pool_grad(const VjpArgs& a) {
  const Tensor& x = a.ins[1];
  const Tensor ct = a.node.attrs.index != 0 ? where(x > 0.0, a.ct, scalar(x.dtype(), 0.0)) : a.ct;
  return {tie_mean(ct, x, a.node.attrs.window), Tensor()};
}

std::vector<Tensor> jvp_max_pool(const JvpArgs& a) {
  return {tie_mean(a.tans[0], a.ins[0], a.node.attrs.window)};
}

std::vector<Tensor> jvp_max_pool_grad(const JvpArgs& a) {
  if (!a.tans[0].defined()) return {full(a.out.dtype(), a.out.shape(), 0.0)};
  return {grad_op(a.tans[0], a.ins[1], a.node.attrs)};
}

}  // namespace fjit::autodiff
