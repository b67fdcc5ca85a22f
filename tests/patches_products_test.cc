// The compiler's patches-products pass (core/compile/passes/patches_products.cc), through jit:
// - a convolution and its gradients compile to products of the image (no patches op is left;
//   images of 8 channels or more), whose values match a convolution summed in double and whose
//   bits do not depend on the thread count;
// - the input gradient, patches_adjoint(g . W^T), folds into one matmul whose result is the
//   image: the bits of packed_sgemm (bf16: bf16_gemm_packed_b) and then patches_adjoint's sums
//   in order, on 1 and 3 threads;
// - the reference kernels evaluate the optimized graph; with FJIT_GEMM=eigen the pass leaves the
//   graph alone.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/base/isa.h"
#include "core/base/threads.h"
#include "core/kernels/gemm/bf16_gemm.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "fjit.h"
#include "tests/fusion_test_util.h"
#include "tests/patches_test_util.h"

namespace fjit {
namespace {

using namespace patches_testing;

TEST(PatchesProducts, ConvolutionStepsMultiplyTheImage) {
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

// A convolution's input gradient through jit: patches_adjoint(g . W^T) is one matmul whose result
// is the image, with the bits of packed_sgemm's product and then patches_adjoint's sums, on 1
// and 3 threads, and the values of the convolution's transpose summed in double.
TEST(PatchesProducts, InputGradientsFoldIntoTheImage) {
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
    const Array y =
        jit([opts](const Tensor& v, const Tensor& f) { return conv2d(v, f, opts); })(x, w);
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

// Under the bf16 policy the products take bf16 operands (and give f32 results). At most 16
// output channels, the forward and weight-gradient products keep their kernels (matmul_bf16.h)
// and their patches; the input gradient folds where the bf16 products run natively
// (AVX512_BF16, AMX), with the bits of bf16_gemm_packed_b and then the adjoint's sums in order.
TEST(PatchesProducts, Bf16InputGradientsFoldWhereTheProductsAreNative) {
  auto step = jit([](const Tensor& x, const Tensor& w) {
    return grad(
        [](const Tensor& v, const Tensor& f) {
          PrecisionScope s({.compute = DType::bf16});
          return sum(square(conv2d(v, f, ConvOptions{.padding = Padding::same()})));
        },
        argnums<0, 1>)(x, w);
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

// Wider convolutions under the bf16 policy, on AVX512_BF16 without the AMX tiles: the forward
// and weight-gradient products read the bf16 image (patches_gemm_bf16.cc), no patches op is
// left, and both give the bits of the bf16 matmul over the materialized patches (the plan made
// without the pass), on 1 and 3 threads; and again after the ISA limit drops to AVX2 (the
// kernel then multiplies the patches on the matmul's widening path). The depths (pixels) span
// several of the weight gradient's depth chunks, the last one odd.
TEST(PatchesProducts, Bf16ForwardAndWeightGradientsReadTheImage) {
  if (!active_avx512_bf16() || active_amx_bf16()) GTEST_SKIP() << "the AVX512_BF16 path's fold";
  struct Conv {
    Shape x, w, y;
    int64_t stride;
    bool same;
  };
  for (const Conv& cv :
       {Conv{{5, 13, 11, 16}, {3, 3, 16, 40}, {5, 13, 11, 40}, 1, true},  // 715 pixels
        Conv{{3, 20, 20, 8}, {3, 3, 8, 33}, {3, 9, 9, 33}, 2, false}}) {
    const ConvOptions opts{.strides = {cv.stride, cv.stride},
                           .padding = cv.same ? Padding::same() : Padding::valid()};
    auto make = [opts] {
      return jit([opts](const Tensor& x, const Tensor& w, const Tensor& c) {
        PrecisionScope s({.compute = DType::bf16});
        const Tensor y = conv2d(x, w, opts);
        const Tensor dw = grad([opts](const Tensor& f, const Tensor& v, const Tensor& ct) {
          PrecisionScope inner({.compute = DType::bf16});
          return sum(conv2d(v, f, opts) * ct);
        })(w, x, c);
        return std::make_tuple(y, dw);
      });
    };
    const Array x = random_array(cv.x, 21), w = random_array(cv.w, 22), c = random_array(cv.y, 23);
    const Shape& ys = cv.y;
    auto folded = make();
    const auto [y1, dw1] = folded(x, w, c);
    ASSERT_EQ(y1.shape(), ys);
    const Graph& graph = *folded.core().last_entry()->exe->graph;
    EXPECT_EQ(count_ops(graph, Op::Patches, false), 0) << graph.to_string();
    EXPECT_EQ(count_ops(graph, Op::MatMul, true), 2) << graph.to_string();
    const PackedGemmUse saved_use = packed_gemm_use();
    set_packed_gemm_use(PackedGemmUse::never);
    auto plain = make();
    const auto [y0, dw0] = plain(x, w, c);
    set_packed_gemm_use(saved_use);
    EXPECT_GE(count_ops(*plain.core().last_entry()->exe->graph, Op::Patches, false), 1);
    EXPECT_TRUE(y1.bit_equal(y0));
    EXPECT_TRUE(dw1.bit_equal(dw0));
    const int saved = intra_op_threads();
    set_intra_op_threads(3);
    const auto [y3, dw3] = folded(x, w, c);
    set_intra_op_threads(saved);
    EXPECT_TRUE(y3.bit_equal(y0));
    EXPECT_TRUE(dw3.bit_equal(dw0));
    // Values: the convolution of x and w rounded to bf16, summed in double.
    if (!cv.same) {
      auto rounded = jit([](const Tensor& v) { return cast(cast(v, DType::bf16), DType::f32); });
      const Array xr = rounded(x), wr = rounded(w);
      for (int64_t i = 0; i < y1.size(); i += 7) {
        const int64_t f = i % ys[3], ox = i / ys[3] % ys[2], oy = i / ys[3] / ys[2] % ys[1];
        const double want = conv_at(xr, wr, cv.stride, i / ys[3] / ys[2] / ys[1], oy, ox, f);
        EXPECT_NEAR(y1.data<float>()[i], want, 1e-5 * (1 + std::abs(want)));
      }
    }
    // The plan made on AVX512_BF16, run on the widening path: the widening path's bits.
    set_isa_limit(Isa::avx2);
    const auto [yw, dww] = folded(x, w, c);
    set_packed_gemm_use(PackedGemmUse::never);
    auto plain_wide = make();
    const auto [yw0, dww0] = plain_wide(x, w, c);
    set_packed_gemm_use(saved_use);
    set_isa_limit(Isa::avx512);
    EXPECT_TRUE(yw.bit_equal(yw0));
    EXPECT_TRUE(dww.bit_equal(dww0));
  }
}

// The reference kernels (the oracle of replay and of the tests that evaluate a compiled graph
// node by node) know both forms: the optimized graph of a convolution's three products,
// evaluated on them, gives the compiled step's values.
TEST(PatchesProducts, TheReferenceKernelsEvaluateTheOptimizedGraph) {
  auto step = jit([](const Tensor& x, const Tensor& w, const Tensor& c) {
    return grad(
        [](const Tensor& v, const Tensor& f, const Tensor& ct) {
          return sum(conv2d(v, f, ConvOptions{.padding = Padding::same()}) * ct);
        },
        argnums<0, 1>)(x, w, c);
  });
  const Array x = random_array({3, 6, 7, 8}, 12), w = random_array({3, 3, 8, 5}, 13);
  const Array c = random_array({3, 6, 7, 5}, 14);
  const auto [dx, dw] = step(x, w, c);
  const Graph& graph = *step.core().last_entry()->exe->graph;
  ASSERT_EQ(count_ops(graph, Op::MatMul, true), 2) << graph.to_string();  // dW, and dx folded
  const std::vector<Array> ref = fusion_testing::reference(graph, {x, w, c});
  ASSERT_EQ(ref.size(), 2u);
  for (int64_t i = 0; i < dx.size(); ++i)
    EXPECT_NEAR(ref[0].data<float>()[i], dx.data<float>()[i],
                1e-4 * (1 + std::abs(dx.data<float>()[i])));
  for (int64_t i = 0; i < dw.size(); ++i)
    EXPECT_NEAR(ref[1].data<float>()[i], dw.data<float>()[i],
                1e-4 * (1 + std::abs(dw.data<float>()[i])));
}

TEST(PatchesProducts, WithoutThePackedGemmThePatchesStay) {
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
