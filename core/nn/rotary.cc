// Rotary position embedding (see core/nn/rotary.h).
#include "core/nn/rotary.h"

#include <cmath>
#include <string>

#include "core/ir/convert.h"

namespace fjit {

Tensor rotary_embedding(const Tensor& x, const Tensor& positions, double base, Loc loc) {
  detail::CompositeScope scope("rotary_embedding", {x, positions});
  if (!x.defined() || x.rank() != 4 || !is_floating(x.dtype()))
    detail::fail("rotary_embedding", {x, positions},
                 "expects floating-point x [batch, tokens, heads, head features]", &loc);
  const int64_t t = x.dim(1), dh = x.dim(3), h = dh / 2;
  if (dh % 2 != 0)
    detail::fail("rotary_embedding", {x, positions},
                 "the head features (" + std::to_string(dh) + ") must be even", &loc);
  if (!positions.defined() || positions.dtype() != DType::i32 || positions.shape() != Shape{t})
    detail::fail("rotary_embedding", {x, positions},
                 "expects i32 positions [" + std::to_string(t) + "], one per token", &loc);
  if (!(base > 0))
    detail::fail("rotary_embedding", {x, positions}, "base must be positive", &loc);
  const DType dt = x.dtype();
  Array inv_freq(dt, {1, h});
  for (int64_t i = 0; i < h; ++i)
    set_element_from_double(dt, inv_freq.raw(), i, std::pow(base, -2.0 * static_cast<double>(i) / dh));
  Tensor angles = mul(reshape(cast(positions, dt, loc), {t, 1}, loc), constant(inv_freq, loc), loc);
  Tensor c = reshape(cos(angles, loc), {t, 1, h}, loc), s = reshape(sin(angles, loc), {t, 1, h}, loc);
  const int64_t b = x.dim(0), heads = x.dim(2);
  Tensor x1 = slice(x, {0, 0, 0, 0}, {b, t, heads, h}, {}, loc);
  Tensor x2 = slice(x, {0, 0, 0, h}, {b, t, heads, dh}, {}, loc);
  return concat({sub(mul(x1, c, loc), mul(x2, s, loc), loc), add(mul(x2, c, loc), mul(x1, s, loc), loc)},
                -1, loc);
}

}  // namespace fjit
