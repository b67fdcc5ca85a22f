// The window ops over NHWC images: patches (im2col) and its adjoint (col2im), and max pooling
// and its gradient.
//
// These are ops of the table (ir/ops.def) with kernels and VJP rules of their own; the layers
// built from them (convolution, pooling) are in core/nn/conv.h. Images are NHWC ([batch,
// height, width, channels]).
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

// max_pool_window(x [N,H,W,C]) -> [N, OH, OW, C]: the max of each window of patches(x), with
// padding that never wins (-inf; an integer image's lowest value). A NaN in a window wins; of
// equal values the first in the window's (kh, kw) order is kept (so -0 or +0, as it comes).
// The windows are never materialized: one pass reads x and writes the result.
Tensor max_pool_window(const Tensor& x, const Window& window, Loc loc = Loc::current());
// Its VJP: the image of x's shape where each element sums, over the windows that hold it and
// whose max it equals, that window's cotangent divided by the number of elements equal to the
// max (padding included when the max is -inf). The same values, rounding and summation order
// as reduce_max's rule over patches followed by patches_adjoint, in one pass over x and ct.
Tensor max_pool_grad(const Tensor& ct, const Tensor& x, const Window& window,
                     Loc loc = Loc::current());

namespace detail {
// Throws the builder's TraceError unless x is a defined rank-4 (NHWC) tensor.
void require_image(const char* name, const Tensor& x, const Loc& loc);
}  // namespace detail

}  // namespace fjit
