// Dropout (see core/nn/dropout.h).
#include "core/nn/dropout.h"

#include <string>

namespace fjit {

Tensor dropout(const Tensor& x, double rate, const Tensor& key, Loc loc) {
  detail::CompositeScope scope("dropout", {x, key});
  if (!x.defined() || !is_floating(x.dtype()))
    detail::fail("dropout", {x}, "expects a floating-point operand", &loc);
  if (!(rate >= 0.0 && rate < 1.0))
    detail::fail("dropout", {x}, "rate must be in [0, 1), got " + std::to_string(rate), &loc);
  if (rate == 0.0) return x;
  Tensor keep = bernoulli(key, 1.0 - rate, x.shape(), loc);
  return where(keep, mul(x, scalar(x.dtype(), 1.0 / (1.0 - rate), loc), loc), zeros_like(x, loc),
               loc);
}

}  // namespace fjit
