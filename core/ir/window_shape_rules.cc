// Shape rules of the window ops over NHWC images: patches, patches_adjoint, max_pool and
// max_pool_grad (core/trace/patches.h), from the window attribute (core/ir/node.h).
#include <array>
#include <string>

#include "core/ir/shape_rules_internal.h"

namespace fjit::shape_rules_internal {
namespace {

// The output extents {OH, OW} of a window (core/ir/node.h's window attribute) over an NHWC
// image; fails on a malformed window or one larger than the padded image.
std::array<int64_t, 2> window_extents(const Attrs& a, const ValueType& image) {
  const std::vector<int64_t>& w = a.window;
  if (w.size() != 10) fail("window attributes must have 10 entries");
  for (int i = 0; i < 6; ++i)
    if (w[i] < 1) fail("window, strides and dilation must be >= 1");
  for (int i = 6; i < 10; ++i)
    if (w[i] < 0) fail("padding must be >= 0");
  if (image.shape.size() != 4)
    fail("expects an NHWC image of rank 4, got " + type_str(image.dtype, image.shape));
  const int64_t h = image.shape[1], wd = image.shape[2];
  const int64_t span_h = (w[0] - 1) * w[4] + 1, span_w = (w[1] - 1) * w[5] + 1;
  const int64_t ph = h + w[6] + w[7], pw = wd + w[8] + w[9];
  if (ph < span_h || pw < span_w)
    fail("window " + std::to_string(span_h) + "x" + std::to_string(span_w) +
         " (dilated) is larger than the padded image " + std::to_string(ph) + "x" +
         std::to_string(pw) + " of " + type_str(image.dtype, image.shape));
  return {(ph - span_h) / w[2] + 1, (pw - span_w) / w[3] + 1};
}

}  // namespace

// The window geometry of patches(x): x [N, H, W, C] gives [N, OH, OW, KH * KW * C], the
// window's (kh, kw, c) flattened row-major; patches_adjoint maps the latter back to `hint`.
ValueType patches_type(Op op, const Attrs& a, const ValueType& x, const ValueType& hint) {
  const ValueType& image = op == Op::Patches ? x : hint;
  const auto [oh, ow] = window_extents(a, image);
  const Shape cols{image.shape[0], oh, ow, a.window[0] * a.window[1] * image.shape[3]};
  // patches only copies: bf16 images too (the mixed-precision policy's convolutions).
  require_dtype(x, is_arithmetic(x.dtype) || (op == Op::Patches && x.dtype == DType::bf16),
                "a numeric operand");
  if (op == Op::Patches) return {x.dtype, cols};
  if (x.shape != cols || x.dtype != hint.dtype)
    fail("patches " + type_str(x.dtype, x.shape) + " do not match the windows of " +
         type_str(hint.dtype, hint.shape) + " (" + type_str(hint.dtype, cols) + ")");
  return hint;
}

// max_pool(x [N, H, W, C]) -> [N, OH, OW, C]; max_pool_grad(ct [N, OH, OW, C], x) -> x's type.
ValueType max_pool_type(Op op, const Attrs& a, std::span<const ValueType> ins) {
  const ValueType& x = ins[op == Op::MaxPool ? 0 : 1];
  const auto [oh, ow] = window_extents(a, x);
  const Shape out{x.shape[0], oh, ow, x.shape[3]};
  if (op == Op::MaxPool) {
    require_dtype(x, is_arithmetic(x.dtype), "a numeric image");
    return {x.dtype, out};
  }
  require_dtype(x, is_floating(x.dtype), "a floating-point image");
  const ValueType& ct = ins[0];
  if (ct.dtype != x.dtype || ct.shape != out)
    fail("cotangent " + type_str(ct.dtype, ct.shape) + " must be " + type_str(x.dtype, out) +
         ", the pooled shape of the image " + type_str(x.dtype, x.shape));
  return x;
}

}  // namespace fjit::shape_rules_internal
