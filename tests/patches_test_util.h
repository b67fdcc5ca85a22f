// Helpers of the convolution-product tests (patches_gemm_test.cc, patches_products_test.cc):
// patches and their adjoint written out by loops from their definitions, random operands, and
// bit-for-bit comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/gemm/patches_gemm.h"
#include "fjit.h"

namespace fjit::patches_testing {

struct Case {
  int64_t n, h, w, c, kh, kw, sh, sw, dh, dw, top, bottom, left, right;
  float pad;
};

inline PatchesOperand operand(const Case& k, const std::vector<float>& x) {
  PatchesOperand o;
  o.x = x.data();
  o.pad = k.pad;
  o.n = k.n, o.h = k.h, o.w = k.w, o.c = k.c;
  o.kh = k.kh, o.kw = k.kw, o.sh = k.sh, o.sw = k.sw, o.dh = k.dh, o.dw = k.dw;
  o.top = k.top, o.left = k.left;
  o.oh = (k.h + k.top + k.bottom - ((k.kh - 1) * k.dh + 1)) / k.sh + 1;
  o.ow = (k.w + k.left + k.right - ((k.kw - 1) * k.dw + 1)) / k.sw + 1;
  return o;
}

// The patches [pixels, taps] written out by the definition: tap (i, j, ch) of output pixel
// (b, y, x) reads image pixel (y * sh - top + i * dh, x * sw - left + j * dw), or the pad.
inline std::vector<float> patches_by_loops(const PatchesOperand& o) {
  std::vector<float> cols(o.pixels() * o.taps());
  int64_t at = 0;
  for (int64_t b = 0; b < o.n; ++b)
    for (int64_t y = 0; y < o.oh; ++y)
      for (int64_t x = 0; x < o.ow; ++x)
        for (int64_t i = 0; i < o.kh; ++i)
          for (int64_t j = 0; j < o.kw; ++j)
            for (int64_t ch = 0; ch < o.c; ++ch) {
              const int64_t iy = y * o.sh - o.top + i * o.dh, ix = x * o.sw - o.left + j * o.dw;
              const bool in = iy >= 0 && iy < o.h && ix >= 0 && ix < o.w;
              cols[at++] = in ? o.x[((b * o.h + iy) * o.w + ix) * o.c + ch] : o.pad;
            }
  return cols;
}

inline std::vector<float> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

inline void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    ASSERT_EQ(a, b) << what << ": element " << i << " " << got[i] << " vs " << want[i];
  }
}
// A convolution summed in double: y[b, oy, ox, f] = sum over taps of x . w (VALID padding,
// stride s), the independent oracle for the compiled step's values.
inline double conv_at(const Array& x, const Array& w, int64_t s, int64_t b, int64_t oy, int64_t ox,
                      int64_t f) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  double acc = 0;
  for (int64_t i = 0; i < ws[0]; ++i)
    for (int64_t j = 0; j < ws[1]; ++j)
      for (int64_t ch = 0; ch < ws[2]; ++ch)
        acc += static_cast<double>(
                   x.data<float>()[((b * xs[1] + oy * s + i) * xs[2] + ox * s + j) * xs[3] + ch]) *
               w.data<float>()[((i * ws[1] + j) * ws[2] + ch) * ws[3] + f];
  return acc;
}

inline Array random_array(const Shape& s, uint32_t seed) {
  int64_t count = 1;
  for (int64_t d : s) count *= d;
  const std::vector<float> v = random_values(count, seed);
  return Array::from_vector(v, s);
}

inline int count_ops(const Graph& g, Op op, bool with_window) {
  int found = 0;
  for (const Node& n : g.nodes()) found += n.op == op && (!with_window || !n.attrs.window.empty());
  return found;
}

// patches_adjoint's sums in its order, in float: every (pixel, tap) added into a zeroed image
// in order of pixel, then tap (core/kernels/structural/patches.cc).
inline std::vector<float> adjoint_by_loops(const PatchesOperand& o,
                                           const std::vector<float>& cols) {
  std::vector<float> img(o.n * o.h * o.w * o.c, 0.f);
  int64_t at = 0;
  for (int64_t b = 0; b < o.n; ++b)
    for (int64_t y = 0; y < o.oh; ++y)
      for (int64_t x = 0; x < o.ow; ++x)
        for (int64_t i = 0; i < o.kh; ++i)
          for (int64_t j = 0; j < o.kw; ++j, at += o.c) {
            const int64_t iy = y * o.sh - o.top + i * o.dh, ix = x * o.sw - o.left + j * o.dw;
            if (iy < 0 || iy >= o.h || ix < 0 || ix >= o.w) continue;
            for (int64_t ch = 0; ch < o.c; ++ch)
              img[((b * o.h + iy) * o.w + ix) * o.c + ch] += cols[at + ch];
          }
  return img;
}

// exact[pixel] += v for patch element (p, t), where it reads the image.
inline void exact_add(const PatchesOperand& o, int64_t p, int64_t t, double v,
                      std::vector<double>& exact) {
  const int64_t b = p / (o.oh * o.ow), y = p / o.ow % o.oh, x = p % o.ow;
  const int64_t ch = t % o.c, j = t / o.c % o.kw, i = t / o.c / o.kw;
  const int64_t iy = y * o.sh - o.top + i * o.dh, ix = x * o.sw - o.left + j * o.dw;
  if (iy >= 0 && iy < o.h && ix >= 0 && ix < o.w)
    exact[((b * o.h + iy) * o.w + ix) * o.c + ch] += v;
}

}  // namespace fjit::patches_testing
