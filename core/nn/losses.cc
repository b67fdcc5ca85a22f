// Losses built from ops (see core/nn/losses.h).
#include "core/nn/losses.h"

#include "core/nn/activations.h"

namespace fjit {

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
