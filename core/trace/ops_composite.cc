// Composite ops built from the op table: one_hot and the softmax family.
#include "core/trace/ops.h"

namespace fjit {

Tensor one_hot(const Tensor& labels, int64_t depth, DType dtype, Loc loc) {
  detail::CompositeScope scope("one_hot", {labels});
  if (!labels.defined() || labels.dtype() != DType::i32)
    detail::fail("one_hot", {labels}, "expects i32 labels", &loc);
  if (depth <= 0) detail::fail("one_hot", {labels}, "depth must be positive", &loc);
  Shape s = labels.shape();
  s.push_back(depth);
  Tensor classes = iota(DType::i32, {depth}, 0, loc);
  return cast(eq(expand_dims(labels, -1, loc), classes, loc), dtype, loc);
}

Tensor log_softmax(const Tensor& x, int64_t axis, Loc loc) {
  detail::CompositeScope scope("log_softmax", {x});
  if (!x.defined() || !is_floating(x.dtype()))
    detail::fail("log_softmax", {x}, "expects floating-point logits", &loc);
  Tensor shifted = sub(x, max(x, {axis}, true, loc), loc);
  return sub(shifted, log(sum(exp(shifted, loc), {axis}, true, loc), loc), loc);
}

Tensor softmax(const Tensor& x, int64_t axis, Loc loc) {
  detail::CompositeScope scope("softmax", {x});
  if (!x.defined() || !is_floating(x.dtype()))
    detail::fail("softmax", {x}, "expects floating-point logits", &loc);
  Tensor e = exp(sub(x, max(x, {axis}, true, loc), loc), loc);
  return div(e, sum(e, {axis}, true, loc), loc);
}

Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Loc loc) {
  detail::CompositeScope scope("softmax_cross_entropy", {logits, labels});
  if (!logits.defined() || !labels.defined() || logits.rank() < 1)
    detail::fail("softmax_cross_entropy", {logits, labels}, "expects logits [..., C]", &loc);
  if (labels.dtype() != DType::i32)
    detail::fail("softmax_cross_entropy", {logits, labels}, "expects i32 labels", &loc);
  const Shape ls = logits.shape();
  Shape batch(ls.begin(), ls.end() - 1);
  if (labels.shape() != batch)
    detail::fail("softmax_cross_entropy", {logits, labels},
                 "labels must have shape " + shape_str(batch), &loc);
  Tensor logp = log_softmax(logits, -1, loc);
  Tensor picked = sum(mul(logp, one_hot(labels, logits.shape().back(), logits.dtype(), loc), loc),
                      {-1}, false, loc);
  return neg(picked, loc);
}

}  // namespace fjit
