// Convolution and pooling layers (see core/nn/conv.h).
#include "core/nn/conv.h"

#include <stdexcept>
#include <string>

#include "core/nn/precision.h"

namespace fjit {
namespace {

// Window reductions: [N,OH,OW,KH*KW*C] -> [N,OH,OW,KH*KW,C].
Tensor windows(const Tensor& x, const Window& win, double pad_value, const Loc& loc) {
  Tensor cols = patches(x, win, pad_value, loc);
  const Shape& s = cols.shape();
  return reshape(cols, {s[0], s[1], s[2], win.size[0] * win.size[1], x.shape()[3]}, loc);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const ConvOptions& o, Loc loc) {
  detail::CompositeScope scope("conv2d", {x, w});
  detail::require_image("conv2d", x, loc);
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
  // Under the bf16 policy the image is cast before patches (one cast of the image, not of its
  // KH*KW-times larger patches; the same bf16 values, and the patches' cotangent stays f32).
  const bool bf16 = g == 1 && current_precision().compute == DType::bf16 && x.dtype() == DType::f32;
  Tensor cols = patches(bf16 ? cast(x, DType::bf16, loc) : x, win, 0.0, loc);  // [N, OH, OW, KH*KW*C]
  const int64_t n = cols.shape()[0], oh = cols.shape()[1], ow = cols.shape()[2];
  const int64_t m = n * oh * ow, k = kh * kw;
  if (g == 1) {
    const Tensor rows = reshape(cols, {m, k * c}, loc), w2 = reshape(w, {k * c, out_c}, loc);
    Tensor y = bf16 ? matmul(rows, cast(w2, DType::bf16, loc), DType::f32, false, false, loc)
                    : policy_matmul(rows, w2, false, false, loc);
    return reshape(y, {n, oh, ow, out_c}, loc);
  }
  // One batched product per group: [G, M, K*Cg] x [G, K*Cg, O/G].
  const int64_t og = out_c / g;
  Tensor xg = transpose(reshape(cols, {m, k, g, cg}, loc), {2, 0, 1, 3}, loc);
  Tensor wg = transpose(reshape(w, {k, cg, g, og}, loc), {2, 0, 1, 3}, loc);
  Tensor y = policy_matmul(reshape(xg, {g, m, k * cg}, loc), reshape(wg, {g, k * cg, og}, loc), false,
                    false, loc);  // [G, M, O/G]
  return reshape(transpose(y, {1, 0, 2}, loc), {n, oh, ow, out_c}, loc);
}

Tensor conv2d(const Params& p, const std::string& name, const Tensor& x,
              const ConvOptions& options, Loc loc) {
  return add(conv2d(x, p[name + "/w"], options, loc), p[name + "/b"], loc);
}

void conv2d_params(ArrayDict& d, const std::string& name, const Shape& filter, uint64_t seed,
                   Init init, DType dtype) {
  if (filter.size() != 4)
    throw std::invalid_argument("conv2d_params: '" + name + "' needs an HWIO filter shape, got " +
                                shape_str(filter));
  d.set(name + "/w", initial_array(init, filter, seed, dtype));
  d.set(name + "/b", zeros({filter.back()}, dtype));
}

Tensor max_pool(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                Padding padding, Loc loc) {
  detail::CompositeScope scope("max_pool", {x});
  detail::require_image("max_pool", x, loc);
  return max_pool_window(x, Window{window, strides, {1, 1}, padding}, loc);
}

Tensor avg_pool(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                Padding padding, Loc loc) {
  detail::CompositeScope scope("avg_pool", {x});
  detail::require_image("avg_pool", x, loc);
  if (!is_floating(x.dtype())) detail::fail("avg_pool", {x}, "expects a floating-point image", &loc);
  const Window win{window, strides, {1, 1}, padding};
  Tensor total = sum(windows(x, win, 0.0, loc), {3}, false, loc);
  // Elements of each window inside the image: a constant the compiler folds.
  const Shape& s = x.shape();
  Tensor ones = full(x.dtype(), {1, s[1], s[2], 1}, 1.0, loc);
  Tensor count = sum(windows(ones, win, 0.0, loc), {3}, false, loc);  // [1, OH, OW, 1]
  return div(total, count, loc);
}

}  // namespace fjit
