// The window ops: patches (im2col) and its adjoint (col2im), over NHWC images.
//
// These two are ops of the table (ir/ops.def) with kernels and VJP rules of their own; the
// layers built from them (convolution, pooling) are composites in core/nn/conv.h. Images are
// NHWC ([batch, height, width, channels]).
#pragma once

#include <array>

#include "core/trace/ops.h"

namespace fjit {

// How a window op pads its input: VALID (none), SAME (output extent ceil(in / stride); the
// padding split as evenly as possible, the extra row or column at the bottom or right, as in
// XLA), or explicit amounts per side.
struct Padding {
  enum Kind { kValid, kSame, kExplicit };
  Kind kind = kValid;
  int64_t top = 0, bottom = 0, left = 0, right = 0;

  static Padding valid() { return {}; }
  static Padding same() { return {kSame}; }
  static Padding explicit_pads(int64_t top, int64_t bottom, int64_t left, int64_t right) {
    return {kExplicit, top, bottom, left, right};
  }
};

// A window over the two spatial axes of an NHWC image.
struct Window {
  std::array<int64_t, 2> size{1, 1};
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 2> dilation{1, 1};
  Padding padding;
};

// patches(x [N,H,W,C]) -> [N, OH, OW, KH*KW*C]: row (n, oh, ow) holds the window at
// (oh * stride_h - pad_top, ow * stride_w - pad_left), its elements in (kh, kw, c) order;
// elements outside x read `pad_value`.
Tensor patches(const Tensor& x, const Window& window, double pad_value = 0.0,
               Loc loc = Loc::current());
// The adjoint of patches: an image of `image_shape` where each element is the sum of every
// patch element that read it (col2im). patches_adjoint(patches(x)) counts window overlaps.
Tensor patches_adjoint(const Tensor& cols, const Window& window, const Shape& image_shape,
                       Loc loc = Loc::current());

namespace detail {
// Throws the builder's TraceError unless x is a defined rank-4 (NHWC) tensor.
void require_image(const char* name, const Tensor& x, const Loc& loc);
}  // namespace detail

}  // namespace fjit
