// Internal: the geometry of a window op's instruction (patches, patches_adjoint, max_pool,
// max_pool_grad), read from what its selector stored in Instr::p and Instr::v, and the walk
// over every (output pixel, window tap) in one fixed order that their kernels share.
#pragma once

#include <cstdint>

#include "core/kernels/families.h"

namespace fjit::kernels::st {

// p: [0] N, [1] H, [2] W, [3] C, [4] OH, [5] OW;  v: the window attribute (core/ir/node.h).
struct Geometry {
  int64_t n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, top, left;
  explicit Geometry(const Instr& in)
      : n(in.p[0]), h(in.p[1]), w(in.p[2]), c(in.p[3]), oh(in.p[4]), ow(in.p[5]),
        kh(in.v[0]), kw(in.v[1]), sh(in.v[2]), sw(in.v[3]), dh(in.v[4]), dw(in.v[5]),
        top(in.v[6]), left(in.v[8]) {}

  // No two taps (of one window or of two) read the same pixel: windows no larger than their
  // strides, taps adjacent.
  bool disjoint() const { return dh == 1 && dw == 1 && kh <= sh && kw <= sw; }
  // With disjoint(): every pixel of the image is read by some tap.
  bool covers_image() const {
    auto hits = [](int64_t out, int64_t k, int64_t stride, int64_t before, int64_t extent) {
      int64_t hit = 0;
      for (int64_t y = 0; y < out; ++y)
        for (int64_t i = 0; i < k; ++i) {
          const int64_t at = y * stride - before + i;
          hit += at >= 0 && at < extent;
        }
      return hit;
    };
    return hits(oh, kh, sh, top, h) == h && hits(ow, kw, sw, left, w) == w;
  }

  // Elements of one image and of its patches.
  int64_t image_elems() const { return h * w * c; }
  int64_t patches_elems() const { return oh * ow * kh * kw * c; }

  // Calls tap(row_offset, image_offset or -1) for every (pixel, tap) of images [b0, b1) in
  // order, the offsets in elements of the patches buffer and of the image.
  template <class Tap> void for_each_tap(int64_t b0, int64_t b1, Tap&& tap) const {
    int64_t row = b0 * patches_elems();
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x)
          for (int64_t i = 0; i < kh; ++i) {
            const int64_t iy = y * sh - top + i * dh;
            for (int64_t j = 0; j < kw; ++j, row += c) {
              const int64_t ix = x * sw - left + j * dw;
              const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
              tap(row, inside ? ((b * h + iy) * w + ix) * c : int64_t{-1});
            }
          }
  }
};

// Stores the image and output extents a Geometry reads: p[0..3] the image's N, H, W, C;
// p[4], p[5] the output's OH, OW; v the window attribute.
inline void store_geometry(Instr& instr, const Shape& image, int64_t oh, int64_t ow) {
  for (int d = 0; d < 4; ++d) instr.p[d] = image[d];
  instr.p[4] = oh;
  instr.p[5] = ow;
  instr.v = instr.attrs.window;
}

}  // namespace fjit::kernels::st
