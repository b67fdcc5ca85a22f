// Builders for the window ops, convolution, pooling and GELU (see core/trace/nn.h).
#include "core/trace/nn.h"

#include <cmath>
#include <limits>
#include <string>

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

void require_image(const char* name, const Tensor& x, const Loc& loc) {
  if (!x.defined()) detail::fail(name, {}, "operand is an undefined Tensor", &loc);
  if (x.rank() != 4)
    detail::fail(name, {x}, "expects an NHWC image of rank 4, got " + x.type_string(), &loc);
}

// Window reductions: [N,OH,OW,KH*KW*C] -> [N,OH,OW,KH*KW,C].
Tensor windows(const Tensor& x, const Window& win, double pad_value, const Loc& loc) {
  Tensor cols = patches(x, win, pad_value, loc);
  const Shape& s = cols.shape();
  return reshape(cols, {s[0], s[1], s[2], win.size[0] * win.size[1], x.shape()[3]}, loc);
}

}  // namespace

Tensor patches(const Tensor& x, const Window& window, double pad_value, Loc loc) {
  require_image("patches", x, loc);
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

Tensor conv2d(const Tensor& x, const Tensor& w, const ConvOptions& o, Loc loc) {
  detail::CompositeScope scope("conv2d", {x, w});
  require_image("conv2d", x, loc);
  if (!w.defined() || w.rank() != 4)
    detail::fail("conv2d", {x, w}, "expects an HWIO filter of rank 4", &loc);
  if (!is_floating(x.dtype()) || x.dtype() != w.dtype())
    detail::fail("conv2d", {x, w}, "expects floating-point image and filter of one dtype", &loc);
  const int64_t g = o.groups, c = x.shape()[3];
  const int64_t kh = w.shape()[0], kw = w.shape()[1], cg = w.shape()[2], out_c = w.shape()[3];
  if (g < 1 || c % g != 0 || out_c % g != 0 || cg != c / g)
    detail::fail("conv2d", {x, w}, "the filter's input channels (" + std::to_string(cg) +
                 ") must be the image's channels (" + std::to_string(c) + ") / groups (" +
                 std::to_string(g) + "), and its output channels a multiple of groups", &loc);
  const Window win{{kh, kw}, o.strides, o.dilation, o.padding};
  Tensor cols = patches(x, win, 0.0, loc);  // [N, OH, OW, KH*KW*C]
  const int64_t n = cols.shape()[0], oh = cols.shape()[1], ow = cols.shape()[2];
  const int64_t m = n * oh * ow, k = kh * kw;
  if (g == 1) {
    Tensor y = matmul(reshape(cols, {m, k * c}, loc), reshape(w, {k * c, out_c}, loc), false,
                      false, loc);
    return reshape(y, {n, oh, ow, out_c}, loc);
  }
  // One batched product per group: [G, M, K*Cg] x [G, K*Cg, O/G].
  const int64_t og = out_c / g;
  Tensor xg = transpose(reshape(cols, {m, k, g, cg}, loc), {2, 0, 1, 3}, loc);
  Tensor wg = transpose(reshape(w, {k, cg, g, og}, loc), {2, 0, 1, 3}, loc);
  Tensor y = matmul(reshape(xg, {g, m, k * cg}, loc), reshape(wg, {g, k * cg, og}, loc), false,
                    false, loc);  // [G, M, O/G]
  return reshape(transpose(y, {1, 0, 2}, loc), {n, oh, ow, out_c}, loc);
}

Tensor max_pool(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                Padding padding, Loc loc) {
  detail::CompositeScope scope("max_pool", {x});
  require_image("max_pool", x, loc);
  const Window win{window, strides, {1, 1}, padding};
  return max(windows(x, win, -std::numeric_limits<double>::infinity(), loc), {3}, false, loc);
}

Tensor avg_pool(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                Padding padding, Loc loc) {
  detail::CompositeScope scope("avg_pool", {x});
  require_image("avg_pool", x, loc);
  if (!is_floating(x.dtype())) detail::fail("avg_pool", {x}, "expects a floating-point image", &loc);
  const Window win{window, strides, {1, 1}, padding};
  Tensor total = sum(windows(x, win, 0.0, loc), {3}, false, loc);
  // Elements of each window inside the image: a constant the compiler folds.
  const Shape& s = x.shape();
  Tensor ones = full(x.dtype(), {1, s[1], s[2], 1}, 1.0, loc);
  Tensor count = sum(windows(ones, win, 0.0, loc), {3}, false, loc);  // [1, OH, OW, 1]
  return div(total, count, loc);
}

Tensor gelu(const Tensor& x, bool approximate, Loc loc) {
  detail::CompositeScope scope("gelu", {x});
  if (!x.defined() || !is_floating(x.dtype()))
    detail::fail("gelu", {x}, "expects a floating-point operand", &loc);
  const DType t = x.dtype();
  if (approximate) {
    const double c = std::sqrt(2.0 / M_PI);
    Tensor inner = mul(add(x, mul(mul(mul(x, x, loc), x, loc), scalar(t, 0.044715, loc), loc), loc),
                       scalar(t, c, loc), loc);
    return mul(mul(x, scalar(t, 0.5, loc), loc), add(tanh(inner, loc), scalar(t, 1.0, loc), loc), loc);
  }
  Tensor phi = add(erf(mul(x, scalar(t, M_SQRT1_2, loc), loc), loc), scalar(t, 1.0, loc), loc);
  return mul(mul(x, scalar(t, 0.5, loc), loc), phi, loc);
}

}  // namespace fjit
