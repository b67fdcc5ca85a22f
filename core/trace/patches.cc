// Builders for the window ops (see core/trace/patches.h).
#include "core/trace/patches.h"

#include <algorithm>

namespace fjit {
namespace {

// The op's window attribute (core/ir/node.h) for an image of extents h x w, SAME padding
// resolved here, where the image's extents are known.
std::vector<int64_t> window_attr(const Window& win, int64_t h, int64_t w) {
  std::vector<int64_t> a{win.size[0],     win.size[1],     win.strides[0], win.strides[1],
                         win.dilation[0], win.dilation[1], 0, 0, 0, 0};
  const Padding& p = win.padding;
  if (p.kind == Padding::kExplicit) {
    a[6] = p.top, a[7] = p.bottom, a[8] = p.left, a[9] = p.right;
  } else if (p.kind == Padding::kSame) {
    const int64_t in[2] = {h, w};
    for (int d = 0; d < 2; ++d) {
      if (win.strides[d] < 1 || win.size[d] < 1 || win.dilation[d] < 1) break;  // the rule says
      const int64_t out = (in[d] + win.strides[d] - 1) / win.strides[d];
      const int64_t span = (win.size[d] - 1) * win.dilation[d] + 1;
      const int64_t total = std::max<int64_t>((out - 1) * win.strides[d] + span - in[d], 0);
      a[6 + 2 * d] = total / 2;
      a[7 + 2 * d] = total - total / 2;
    }
  }
  return a;
}

ValueType no_hint() { return {DType::f32, {}}; }

}  // namespace

namespace detail {
void require_image(const char* name, const Tensor& x, const Loc& loc) {
  if (!x.defined()) detail::fail(name, {}, "operand is an undefined Tensor", &loc);
  if (x.rank() != 4)
    detail::fail(name, {x}, "expects an NHWC image of rank 4, got " + x.type_string(), &loc);
}
}  // namespace detail

Tensor patches(const Tensor& x, const Window& window, double pad_value, Loc loc) {
  detail::require_image("patches", x, loc);
  Attrs a;
  a.window = window_attr(window, x.shape()[1], x.shape()[2]);
  a.scalar = pad_value;
  return detail::build("patches", Op::Patches, {x}, std::move(a), no_hint(), &loc);
}

Tensor patches_adjoint(const Tensor& cols, const Window& window, const Shape& image_shape,
                       Loc loc) {
  if (!cols.defined()) detail::fail("patches_adjoint", {}, "operand is an undefined Tensor", &loc);
  if (image_shape.size() != 4)
    detail::fail("patches_adjoint", {cols}, "expects an NHWC image shape of rank 4, got " +
                 shape_str(image_shape), &loc);
  Attrs a;
  a.window = window_attr(window, image_shape[1], image_shape[2]);
  return detail::build("patches_adjoint", Op::PatchesAdjoint, {cols}, std::move(a),
                       ValueType{cols.dtype(), image_shape}, &loc);
}

Tensor max_pool_window(const Tensor& x, const Window& window, Loc loc) {
  detail::require_image("max_pool", x, loc);
  Attrs a;
  a.window = window_attr(window, x.shape()[1], x.shape()[2]);
  return detail::build("max_pool", Op::MaxPool, {x}, std::move(a), no_hint(), &loc);
}

Tensor max_pool_grad(const Tensor& ct, const Tensor& x, const Window& window, Loc loc) {
  detail::require_image("max_pool_grad", x, loc);
  if (!ct.defined()) detail::fail("max_pool_grad", {x}, "cotangent is an undefined Tensor", &loc);
  Attrs a;
  a.window = window_attr(window, x.shape()[1], x.shape()[2]);
  return detail::build("max_pool_grad", Op::MaxPoolGrad, {ct, x}, std::move(a), no_hint(), &loc);
}

}  // namespace fjit
