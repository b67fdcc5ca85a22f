// Convolution and pooling for CNNs, composites of the window ops (core/trace/patches.h).
//
// Images are NHWC ([batch, height, width, channels]) and filters HWIO ([height, width,
// in_channels / groups, out_channels]), as in jax.lax.conv_general_dilated with
// ("NHWC", "HWIO", "NHWC"). A convolution is `patches` (im2col: every window's elements as
// one row) and one product (the compiler gives f32 ones the image: patches_gemm.h); its gradients
// are a product and `patches_adjoint` (col2im), from those ops' rules. Max pooling is its own
// op (max_pool_window, and max_pool_grad for its VJP); average pooling sums patches.
#pragma once

#include <array>
#include <string>

#include "core/ir/array.h"
#include "core/lib/initializers.h"
#include "core/trace/dict.h"
#include "core/trace/patches.h"

namespace fjit {

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

// The convolution layer: conv2d(x, p["<name>/w"], options) + p["<name>/b"], with a filter
// "<name>/w" [KH, KW, C/groups, O] and a bias "<name>/b" [O].
Tensor conv2d(const Params& p, const std::string& name, const Tensor& x,
              const ConvOptions& options = {}, Loc loc = Loc::current());
// Its parameters, added to `d`: the filter drawn with `init` (fans: KH*KW*C/groups in,
// KH*KW*O out), a zero bias.
void conv2d_params(ArrayDict& d, const std::string& name, const Shape& filter, uint64_t seed,
                   Init init = Init::he_normal, DType dtype = DType::f32);

// Max and average pooling of x [N,H,W,C] over `window` x `window` windows moving by `strides`.
// Max pooling pads with -inf (padding never wins); average pooling divides by the number of
// elements of the window inside the image (padding is not counted, as count_include_pad=False).
Tensor max_pool(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                Padding padding = Padding::valid(), Loc loc = Loc::current());
Tensor avg_pool(const Tensor& x, std::array<int64_t, 2> window, std::array<int64_t, 2> strides,
                Padding padding = Padding::valid(), Loc loc = Loc::current());

}  // namespace fjit
