// Composite ops built from the op table that are not layers: one_hot. (Layers, the softmax
// family among them, are in core/nn/.)
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

}  // namespace fjit
