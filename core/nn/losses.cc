// Losses built from ops (see core/nn/losses.h).
#include "core/nn/losses.h"

namespace fjit {

Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Loc loc) {
  detail::CompositeScope scope("softmax_cross_entropy", {logits, labels});
  if (!logits.defined() || !labels.defined() || logits.rank() < 1)
    detail::fail("softmax_cross_entropy", {logits, labels}, "expects logits [..., C]", &loc);
  if (logits.dtype() != DType::f32 && logits.dtype() != DType::f64)
    detail::fail("softmax_cross_entropy", {logits, labels}, "expects f32 or f64 logits", &loc);
  if (labels.dtype() != DType::i32)
    detail::fail("softmax_cross_entropy", {logits, labels}, "expects i32 labels", &loc);
  const Shape ls = logits.shape();
  Shape batch(ls.begin(), ls.end() - 1);
  if (labels.shape() != batch)
    detail::fail("softmax_cross_entropy", {logits, labels},
                 "labels must have shape " + shape_str(batch), &loc);
  return softmax_xent(logits, labels, loc);
}

}  // namespace fjit
