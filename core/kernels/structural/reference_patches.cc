// Reference window ops: patches and patches_adjoint one output element at a time, from its
// index alone (the fast kernels in patches.cc walk taps and copy channel runs instead); max
// pooling and its gradient from those elements, in double (pooling.cc fuses the passes).
#include <cmath>
#include <limits>

#include "core/kernels/structural/structural.h"
#include "core/kernels/structural/structural_reference.h"

namespace fjit::kernels::st {
namespace {

// The image element (n, y, x, c) that patches element (n, oh, ow, k) reads, or false when it
// reads padding. k = (kh * KW + kw) * C + c.
bool source_of(const std::vector<int64_t>& win, const Shape& img, const std::vector<int64_t>& at,
               std::vector<int64_t>& src) {
  const int64_t c_extent = img[3];
  const int64_t k = at[3], c = k % c_extent, tap = k / c_extent;
  const int64_t kh = tap / win[1], kw = tap % win[1];
  const int64_t y = at[1] * win[2] - win[6] + kh * win[4];
  const int64_t x = at[2] * win[3] - win[8] + kw * win[5];
  src = {at[0], y, x, c};
  return y >= 0 && y < img[1] && x >= 0 && x < img[2];
}

// max_pool (ct undefined) or max_pool_grad: per window and channel of image x, the max of the
// window's elements (padding reads -inf; a NaN wins), and for the gradient each element equal
// to it gets ct / (how many are equal, padding included), summed over windows; with
// attrs.index 1, only the pixels where x > 0.
bool reference_max_pool(const Attrs& attrs, const Array& x, const Array* ct, Array& result) {
  const Shape& img = x.shape();
  const int64_t oh = ct ? ct->shape()[1] : result.shape()[1];
  const int64_t ow = ct ? ct->shape()[2] : result.shape()[2];
  const int64_t taps = attrs.window[0] * attrs.window[1];
  std::vector<double> acc(ct ? result.size() : 0, 0.0);
  std::vector<int64_t> src, at;
  for (int64_t n = 0; n < img[0]; ++n)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xo = 0; xo < ow; ++xo)
        for (int64_t c = 0; c < img[3]; ++c) {
          double m = -std::numeric_limits<double>::infinity();
          bool any = false;
          for (int64_t t = 0; t < taps; ++t) {
            at = {n, y, xo, t * img[3] + c};
            if (!source_of(attrs.window, img, at, src)) continue;
            const double v = ref::get(x, ref::ravel(src, img));
            if (!std::isnan(m) && (std::isnan(v) || v > m)) m = v;
            any = true;
          }
          const int64_t out_at = ((n * oh + y) * ow + xo) * img[3] + c;
          if (!ct) {
            const bool integer = x.dtype() == DType::i32;
            ref::set(result, out_at, !any && integer ? std::numeric_limits<int32_t>::lowest() : m);
            continue;
          }
          double count = 0;
          for (int64_t t = 0; t < taps; ++t) {
            at = {n, y, xo, t * img[3] + c};
            const bool inside = source_of(attrs.window, img, at, src);
            count += (inside ? ref::get(x, ref::ravel(src, img)) : -INFINITY) == m;
          }
          const double share = ref::get(*ct, out_at) / count;
          for (int64_t t = 0; t < taps; ++t) {
            at = {n, y, xo, t * img[3] + c};
            if (source_of(attrs.window, img, at, src))
              acc[ref::ravel(src, img)] += (ref::get(x, ref::ravel(src, img)) == m ? 1.0 : 0.0) * share;
          }
        }
  const bool relu_mask = attrs.index != 0;  // where x <= 0 (or NaN), +0
  for (size_t i = 0; i < acc.size(); ++i) {
    const auto at = static_cast<int64_t>(i);
    ref::set(result, at, !relu_mask || ref::get(x, at) > 0 ? acc[i] : 0.0);
  }
  return true;
}

}  // namespace

bool reference_patches(Op op, const Attrs& attrs, std::span<const Array> ins, Array& result) {
  if (op == Op::MaxPool) return reference_max_pool(attrs, ins[0], nullptr, result);
  if (op == Op::MaxPoolGrad) return reference_max_pool(attrs, ins[1], &ins[0], result);
  const Array& in = ins[0];
  std::vector<int64_t> src;
  if (op == Op::Patches) {
    for (int64_t i = 0; i < result.size(); ++i) {
      const std::vector<int64_t> at = ref::unravel(i, result.shape());
      const bool inside = source_of(attrs.window, in.shape(), at, src);
      ref::set(result, i, inside ? ref::get(in, ref::ravel(src, in.shape())) : attrs.scalar);
    }
    return true;
  }
  std::vector<double> acc(result.size(), 0.0);
  for (int64_t i = 0; i < in.size(); ++i) {
    const std::vector<int64_t> at = ref::unravel(i, in.shape());
    if (source_of(attrs.window, result.shape(), at, src))
      acc[ref::ravel(src, result.shape())] += ref::get(in, i);
  }
  for (int64_t i = 0; i < result.size(); ++i) ref::set(result, i, acc[i]);
  return true;
}

}  // namespace fjit::kernels::st
