// Convolution, pooling and activations for CNNs and transformers, as traced ops.
//
// Images are NHWC ([batch, height, width, channels]) and filters HWIO ([height, width,
// in_channels / groups, out_channels]), as in jax.lax.conv_general_dilated with
// ("NHWC", "HWIO", "NHWC"). A convolution is `patches` (im2col: every window's elements as
// one row) followed by one matrix product through the GEMM path; its gradients are again a
// matrix product and `patches_adjoint` (col2im). Pooling reduces over the same windows.
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

struct ConvOptions {
  std::array<int64_t, 2> strides{1, 1};
  Padding padding = Padding::valid();
  std::array<int64_t, 2> dilation{1, 1};  // of the filter (atrous convolution)
  int64_t groups = 1;                     // feature groups: in and out channels split in `groups`
};

// 2-D convolution (cross-correlation, as in every deep-learning library) of x [N,H,W,C] with
// w [KH,KW,C/groups,O] -> [N,OH,OW,O]. Both operands float, of one dtype.
Tensor conv2d(const Tensor& x, const Tensor& w, const ConvOptions& options = {},
              Loc loc = Loc::current());

// Max and average pooling of x [N,H,W,C] over `window` x `window` windows moving by `strides`.
// Max pooling pads with -inf (padding never wins); average pooling divides by the number of
// elements of the window inside the image (padding is not counted, as count_include_pad=False).
Tensor max_pool(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                Padding padding = Padding::valid(), Loc loc = Loc::current());
Tensor avg_pool(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                Padding padding = Padding::valid(), Loc loc = Loc::current());

// GELU: x * Phi(x) with the exact normal CDF (erf), or its tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) when `approximate`.
Tensor gelu(const Tensor& x, bool approximate = false, Loc loc = Loc::current());

}  // namespace fjit
