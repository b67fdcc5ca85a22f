// Convolution products that read their image (core/kernels/gemm/patches_gemm.h and the
// compiler's patches-products pass):
// - the gathered blocks and slivers hold exactly the values of patches written out by a plain
//   loop here (every geometry: channels 1 to 40, strides, dilation, uneven padding, a nonzero
//   padding value);
// - packed_sgemm_patches gives the bits of packed_sgemm over those patches, forward (patches .
//   B) and transposed (patches^T . B), B plain or transposed, on 1-3 threads and both kernels;
// - through jit, a convolution and its gradients compile to products of the image (no patches
//   op is left; images of 8 channels or more), whose values match a convolution summed in double and whose bits do not
//   depend on the thread count; with FJIT_GEMM=eigen the pass leaves the graph alone;
// - the input gradient, patches_adjoint(g . W^T), folds into one matmul whose result is the
//   image: the bits of packed_sgemm and then patches_adjoint's sums in order, on 1 and 3 threads.
#include "core/kernels/gemm/patches_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/base/isa.h"
#include "core/base/threads.h"
#include "core/kernels/gemm/bf16_gemm.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "fjit.h"

namespace fjit {
namespace {

struct Case {
  int64_t n, h, w, c, kh, kw, sh, sw, dh, dw, top, bottom, left, right;
  float pad;
};

PatchesOperand operand(const Case& k, const std::vector<float>& x) {
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
std::vector<float> patches_by_loops(const PatchesOperand& o) {
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

std::vector<float> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

const Case kCases[] = {
    {2, 9, 7, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0.f},      // grey first layer, SAME
    {3, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0.f},   // K = 288: two depth blocks
    {2, 8, 9, 5, 2, 3, 2, 1, 1, 2, 0, 1, 2, 0, -1.5f},    // strides, dilation, uneven pads
    {1, 11, 6, 40, 3, 2, 2, 2, 2, 1, 2, 2, 1, 1, 0.25f},  // runs longer than a sliver
    {5, 4, 4, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0.f},      // 1x1: the image itself
    {2, 7, 7, 8, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3, 0.f},      // a window as large as the image
};

std::string name(const Case& k) {
  return "image " + std::to_string(k.n) + "x" + std::to_string(k.h) + "x" + std::to_string(k.w) +
         "x" + std::to_string(k.c) + " window " + std::to_string(k.kh) + "x" + std::to_string(k.kw);
}

TEST(PatchesGemm, BlocksAndSliversHoldThePatches) {
  for (const Case& k : kCases) {
    const std::vector<float> x = random_values(k.n * k.h * k.w * k.c, 7);
    const PatchesOperand o = operand(k, x);
    const std::vector<float> want = patches_by_loops(o);
    const int64_t rows = o.pixels(), taps = o.taps();
    // A block from an odd corner, and slivers 12 wide of an odd range of taps.
    const int64_t r0 = rows / 3, nr = rows - r0 - 1, c0 = taps / 4, nc = taps - c0;
    std::vector<float> got(nr * nc);
    o.block(r0, nr, c0, nc, got.data(), nc);
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t q = 0; q < nc; ++q)
        ASSERT_EQ(got[r * nc + q], want[(r0 + r) * taps + c0 + q])
            << name(k) << " block " << r << "," << q;
    const int64_t w = 12, slivers = (nc + w - 1) / w;
    std::vector<float> packed(slivers * nr * w, -7.f);
    o.slivers(r0, nr, c0, nc, packed.data(), w);
    for (int64_t s = 0; s < slivers; ++s)
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t q = 0; q < w; ++q) {
          const int64_t col = s * w + q;
          const float expect = col < nc ? want[(r0 + r) * taps + c0 + col] : 0.f;
          ASSERT_EQ(packed[(s * nr + r) * w + q], expect) << name(k) << " sliver " << s;
        }
  }
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    ASSERT_EQ(a, b) << what << ": element " << i << " " << got[i] << " vs " << want[i];
  }
}

TEST(PatchesGemm, ProductsHaveThePackedGemmsBitsOverThePatches) {
  std::vector<Isa> isas{Isa::avx2};
  if (detected_isa() == Isa::avx512) isas.push_back(Isa::avx512);
  for (const Case& k : kCases) {
    const std::vector<float> x = random_values(k.n * k.h * k.w * k.c, 11);
    const PatchesOperand o = operand(k, x);
    const std::vector<float> cols = patches_by_loops(o);
    const int64_t pixels = o.pixels(), taps = o.taps();
    for (const int64_t n : {int64_t{7}, int64_t{64}})
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          const int64_t m = ta ? taps : pixels, depth = ta ? pixels : taps;
          const std::vector<float> b = random_values(depth * n, 13);
          for (const Isa isa : isas) {
            std::vector<float> want(m * n);
            packed_sgemm(isa, ta, tb, m, n, depth, cols.data(), b.data(), want.data(), false, 1);
            for (const int threads : {1, 2, 3}) {
              std::vector<float> got(m * n, NAN);
              packed_sgemm_patches(isa, ta, tb, m, n, depth, o, b.data(), got.data(), threads);
              expect_same_bits(got, want,
                               name(k) + (ta ? " patches^T" : " patches") + (tb ? " B^T" : " B") +
                                   " n " + std::to_string(n) + " threads " +
                                   std::to_string(threads) +
                                   (isa == Isa::avx2 ? " avx2" : " avx512"));
            }
          }
        }
  }
}

// A convolution summed in double: y[b, oy, ox, f] = sum over taps of x . w (VALID padding,
// stride s), the independent oracle for the compiled step's values.
double conv_at(const Array& x, const Array& w, int64_t s, int64_t b, int64_t oy, int64_t ox,
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

Array random_array(const Shape& s, uint32_t seed) {
  int64_t count = 1;
  for (int64_t d : s) count *= d;
  const std::vector<float> v = random_values(count, seed);
  return Array::from_vector(v, s);
}

int count_ops(const Graph& g, Op op, bool with_window) {
  int found = 0;
  for (const Node& n : g.nodes()) found += n.op == op && (!with_window || !n.attrs.window.empty());
  return found;
}

TEST(PatchesGemm, ConvolutionStepsMultiplyTheImage) {
  const int64_t stride = 2;
  auto step = jit([stride](const Tensor& x, const Tensor& w) {
    const Tensor y = conv2d(x, w, ConvOptions{.strides = {stride, stride}});
    return std::make_tuple(
        y, grad(
               [stride](const Tensor& v, const Tensor& f) {
                 return sum(square(conv2d(v, f, ConvOptions{.strides = {stride, stride}})));
               },
               argnums<1>)(x, w));
  });
  const Array x = random_array({3, 9, 11, 8}, 1), w = random_array({3, 3, 8, 5}, 2);
  const int saved = intra_op_threads();
  set_intra_op_threads(1);
  auto [y1, g1] = step(x, w);
  const Graph& graph = *step.core().last_entry()->exe->graph;
  EXPECT_EQ(count_ops(graph, Op::Patches, false), 0) << graph.to_string();
  EXPECT_EQ(count_ops(graph, Op::MatMul, true), 2) << graph.to_string();  // y (shared) and dw
  set_intra_op_threads(3);
  auto [y3, g3] = step(x, w);
  set_intra_op_threads(saved);
  EXPECT_TRUE(y1.bit_equal(y3));
  EXPECT_TRUE(g1.bit_equal(g3));
  const Shape& ys = y1.shape();
  ASSERT_EQ(ys, (Shape{3, 4, 5, 5}));
  for (int64_t b = 0; b < ys[0]; ++b)
    for (int64_t oy = 0; oy < ys[1]; ++oy)
      for (int64_t ox = 0; ox < ys[2]; ++ox)
        for (int64_t f = 0; f < ys[3]; ++f) {
          const double want = conv_at(x, w, stride, b, oy, ox, f);
          EXPECT_NEAR(y1.data<float>()[((b * ys[1] + oy) * ys[2] + ox) * ys[3] + f], want,
                      1e-4 * (1 + std::abs(want)));
        }
  // d/dw sum(y^2) = sum over outputs of 2 y x at the tap: against the double convolution.
  const Array& dw = g1;
  const Shape& ws = w.shape();
  for (int64_t i = 0; i < ws[0]; ++i)
    for (int64_t j = 0; j < ws[1]; ++j)
      for (int64_t ch = 0; ch < ws[2]; ++ch)
        for (int64_t f = 0; f < ws[3]; ++f) {
          double want = 0;
          for (int64_t b = 0; b < ys[0]; ++b)
            for (int64_t oy = 0; oy < ys[1]; ++oy)
              for (int64_t ox = 0; ox < ys[2]; ++ox)
                want +=
                    2 * conv_at(x, w, stride, b, oy, ox, f) *
                    x.data<float>()[((b * 9 + oy * stride + i) * 11 + ox * stride + j) * 8 + ch];
          EXPECT_NEAR(dw.data<float>()[((i * ws[1] + j) * ws[2] + ch) * ws[3] + f], want,
                      1e-3 * (1 + std::abs(want)));
        }
}

// patches_adjoint's sums in its order, in float: every (pixel, tap) added into a zeroed image
// in order of pixel, then tap (core/kernels/structural/patches.cc).
std::vector<float> adjoint_by_loops(const PatchesOperand& o, const std::vector<float>& cols) {
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
void exact_add(const PatchesOperand& o, int64_t p, int64_t t, double v, std::vector<double>& exact) {
  const int64_t b = p / (o.oh * o.ow), y = p / o.ow % o.oh, x = p % o.ow;
  const int64_t ch = t % o.c, j = t / o.c % o.kw, i = t / o.c / o.kw;
  const int64_t iy = y * o.sh - o.top + i * o.dh, ix = x * o.sw - o.left + j * o.dw;
  if (iy >= 0 && iy < o.h && ix >= 0 && ix < o.w) exact[((b * o.h + iy) * o.w + ix) * o.c + ch] += v;
}

// A convolution's input gradient through jit: patches_adjoint(g . W^T) is one matmul whose result
// is the image, with the bits of packed_sgemm's product and then patches_adjoint's sums, on 1
// and 3 threads, and the values of the convolution's transpose summed in double.
TEST(PatchesGemm, InputGradientsFoldIntoTheImage) {
  struct Conv {
    Shape x, w;
    int64_t stride;
    bool same;
  };
  for (const Conv& cv : {Conv{{3, 9, 11, 8}, {3, 3, 8, 5}, 2, false},
                         Conv{{20, 8, 8, 1}, {3, 3, 1, 7}, 1, true},  // one channel: not folded
                         Conv{{4, 7, 6, 16}, {2, 3, 16, 33}, 1, true},
                         // several runs of images per thread, on up to 3 threads
                         Conv{{40, 16, 16, 8}, {3, 3, 8, 16}, 1, true}}) {
    const ConvOptions opts{.strides = {cv.stride, cv.stride},
                           .padding = cv.same ? Padding::same() : Padding::valid()};
    auto dx = jit([opts](const Tensor& x, const Tensor& w, const Tensor& c) {
      return grad([opts](const Tensor& v, const Tensor& f, const Tensor& ct) {
        return sum(conv2d(v, f, opts) * ct);
      })(x, w, c);
    });
    const Array x = random_array(cv.x, 5), w = random_array(cv.w, 6);
    const Array y = jit([opts](const Tensor& v, const Tensor& f) { return conv2d(v, f, opts); })(x, w);
    const Array c = random_array(y.shape(), 7);
    const int saved = intra_op_threads();
    set_intra_op_threads(1);
    const Array g1 = dx(x, w, c);
    set_intra_op_threads(3);
    Array g3 = Array::full(DType::f32, x.shape(), NAN);  // written into: no zeros to rely on
    dx.run_into(g3, x, w, c);
    set_intra_op_threads(saved);
    const Graph& graph = *dx.core().last_entry()->exe->graph;
    const bool folds = cv.x[3] >= 8;  // thinner images keep their patches (patches_products.cc)
    EXPECT_EQ(count_ops(graph, Op::PatchesAdjoint, false), folds ? 0 : 1) << graph.to_string();
    EXPECT_EQ(count_ops(graph, Op::MatMul, true), folds ? 1 : 0) << graph.to_string();
    EXPECT_TRUE(g1.bit_equal(g3));
    // The oracle for the bits: the product on packed_sgemm, then the sums in order.
    PatchesOperand o = operand({cv.x[0], cv.x[1], cv.x[2], cv.x[3], cv.w[0], cv.w[1], cv.stride,
                                cv.stride, 1, 1, 0, 0, 0, 0, 0.f},
                               {});
    o.oh = y.shape()[1], o.ow = y.shape()[2];
    if (cv.same) {  // SAME: the padding before is half the total, rounded down
      o.top = ((o.oh - 1) * cv.stride + cv.w[0] - cv.x[1]) / 2;
      o.left = ((o.ow - 1) * cv.stride + cv.w[1] - cv.x[2]) / 2;
    }
    const int64_t pixels = o.pixels(), taps = o.taps(), nout = cv.w[3];
    std::vector<float> cols(pixels * taps);
    packed_sgemm(active_isa(), false, true, pixels, taps, nout, c.data<float>(), w.data<float>(),
                 cols.data(), false, 1);
    const std::vector<float> want = adjoint_by_loops(o, cols);
    if (folds)
      expect_same_bits(std::vector<float>(g1.data<float>(), g1.data<float>() + g1.size()), want,
                       "input gradient of " + g1.to_string(0));
    // The values: dx[b, iy, ix, ch] = sum over the taps that read it of c . w, in double.
    std::vector<double> exact(want.size(), 0.0);
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t t = 0; t < taps; ++t) {
        double v = 0;
        for (int64_t f = 0; f < nout; ++f)
          v += static_cast<double>(c.data<float>()[p * nout + f]) * w.data<float>()[t * nout + f];
        exact_add(o, p, t, v, exact);
      }
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(g1.data<float>()[i], exact[i], 1e-4 * (1 + std::abs(exact[i]))) << i;
  }
}

// Under the bf16 policy the products take bf16 operands (and give f32 results): the forward and
// weight-gradient products keep their kernels (matmul_bf16.h) and their patches; the input
// gradient folds where the bf16 products run natively (AVX512_BF16, AMX), with the bits of
// bf16_gemm_packed_b and then the adjoint's sums in order.
TEST(PatchesGemm, Bf16InputGradientsFoldWhereTheProductsAreNative) {
  auto step = jit([](const Tensor& x, const Tensor& w) {
    return grad([](const Tensor& v, const Tensor& f) {
      PrecisionScope s({.compute = DType::bf16});
      return sum(square(conv2d(v, f, ConvOptions{.padding = Padding::same()})));
    }, argnums<0, 1>)(x, w);
  });
  const Array x = random_array({2, 6, 5, 8}, 8), w = random_array({3, 3, 8, 3}, 9);
  const auto [dx, dw] = step(x, w);
  const Graph& graph = *step.core().last_entry()->exe->graph;
  const bool native = active_avx512_bf16();
  EXPECT_EQ(count_ops(graph, Op::MatMul, true), native ? 1 : 0) << graph.to_string();
  EXPECT_EQ(count_ops(graph, Op::PatchesAdjoint, false), native ? 0 : 1) << graph.to_string();
  EXPECT_GE(count_ops(graph, Op::Patches, false), 1) << graph.to_string();
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_EQ(dw.shape(), w.shape());
  if (!native) return;
  // patches_adjoint(g . W^T) on bf16 g and W, by hand, against the same on the bf16 kernels.
  const Shape image{12, 9, 9, 8};
  const Window win{.size = {3, 3}, .padding = Padding::same()};
  const int64_t pixels = 12 * 9 * 9, taps = 72, nout = 24;
  auto input_grad = jit([&](const Tensor& g, const Tensor& f) {
    const Tensor product =
        matmul(cast(g, DType::bf16), cast(f, DType::bf16), DType::f32, false, true);
    return patches_adjoint(reshape(product, {12, 9, 9, taps}), win, image);
  });
  auto to_bf16 = jit([](const Tensor& v) { return cast(v, DType::bf16); });
  const Array g = random_array({pixels, nout}, 10), f = random_array({taps, nout}, 11);
  const Array got = input_grad(g, f);
  EXPECT_EQ(count_ops(*input_grad.core().last_entry()->exe->graph, Op::PatchesAdjoint, false), 0);
  const Array gb = to_bf16(g), fb = to_bf16(f);
  std::vector<uint16_t> packed(bf16_packed_b_size(taps, nout) + 32);
  uint16_t* bp = packed.data() + ((64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64) / 2;
  bf16_pack_b(taps, nout, static_cast<const uint16_t*>(fb.raw()), nout, true, bp);
  std::vector<float> cols(pixels * taps);
  bf16_gemm_packed_b(pixels, taps, nout, static_cast<const uint16_t*>(gb.raw()), nout, false, bp,
                     cols.data(), false);
  PatchesOperand o = operand({12, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0.f}, {});
  expect_same_bits(std::vector<float>(got.data<float>(), got.data<float>() + got.size()),
                   adjoint_by_loops(o, cols), "bf16 input gradient");
}

TEST(PatchesGemm, WithoutThePackedGemmThePatchesStay) {
  const PackedGemmUse saved = packed_gemm_use();
  set_packed_gemm_use(PackedGemmUse::never);
  auto f = jit([](const Tensor& x, const Tensor& w) { return conv2d(x, w); });
  const Array x = random_array({2, 5, 5, 8}, 3), w = random_array({3, 3, 8, 4}, 4);
  const Array y = f(x, w);
  set_packed_gemm_use(saved);
  const Graph& graph = *f.core().last_entry()->exe->graph;
  EXPECT_EQ(count_ops(graph, Op::Patches, false), 1);
  EXPECT_EQ(count_ops(graph, Op::MatMul, true), 0);
  EXPECT_NEAR(y.data<float>()[0], conv_at(x, w, 1, 0, 0, 0, 0), 1e-4);
}

}  // namespace
}  // namespace fjit
