// max_pool as one op (core/trace/patches.h: max_pool_window, max_pool_grad), after a ReLU,
// against max pooling composed of patches and reduce_max, whose rules it replaces (and whose
// gradient the compiler does not fold ReLU's rule into): through jit, the value,
// the gradient and the tangent carry the same bits, on random values, many ties, NaN,
// infinities and signed zeros, for pooling windows, overlapping windows and padding, and on
// one intra-op thread and three. The op sweep checks both kernels against their references
// (tests/op_sweep_nn.inc); the gradient checks check both against central differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "core/base/threads.h"
#include "fjit.h"

namespace fjit {
namespace {

Tensor composite_max_pool(const Tensor& x, const Window& w) {
  const Tensor cols = patches(x, w, -std::numeric_limits<double>::infinity());
  const Shape s = cols.shape();
  return max(reshape(cols, {s[0], s[1], s[2], w.size[0] * w.size[1], x.shape()[3]}), {3});
}

// Equal bits, or both NaN (the payload of a NaN that wins a window is not specified).
void expect_same_bits(const Array& got, const Array& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), DType::f32) << what;
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  int reported = 0;
  for (int64_t i = 0; i < got.size() && reported < 5; ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    if (std::memcmp(&g[i], &w[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << " element " << i << ": op " << g[i] << " vs composite " << w[i];
      ++reported;
    }
  }
}

Array image(const Shape& s, int values, uint32_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f, -0.0f, 1.0f, 1.0f, -inf, inf, std::nanf(""), -2.0f};
  std::mt19937 rng(seed);
  Array a(DType::f32, s);
  for (int64_t i = 0; i < a.size(); ++i) {
    const uint32_t r = rng();
    a.data<float>()[i] = values == 0   ? static_cast<float>(r % 4001) / 1000.0f - 2.0f
                         : values == 1 ? static_cast<float>(r % 3) - 1.0f
                                       : specials[r % 8];
  }
  return a;
}

struct Geometry {
  const char* what;
  Shape img;
  Window window;
};

TEST(MaxPool, SameBitsAsPatchesAndReduceMax) {
  const Geometry geometries[] = {
      {"2x2 stride 2", {4, 8, 8, 16}, {{2, 2}, {2, 2}, {1, 1}, Padding::valid()}},
      {"2x2 stride 2 SAME, odd image", {3, 7, 9, 8}, {{2, 2}, {2, 2}, {1, 1}, Padding::same()}},
      {"3x3 stride 2 SAME, overlapping", {2, 9, 9, 5}, {{3, 3}, {2, 2}, {1, 1}, Padding::same()}},
      {"3x2 stride 1, padded", {2, 6, 7, 3}, {{3, 2}, {1, 1}, {1, 1}, Padding::explicit_pads(2, 1, 0, 1)}},
      {"2x2 dilated", {1, 8, 8, 4}, {{2, 2}, {1, 2}, {2, 2}, Padding::valid()}},
      {"2x2 stride 2, large (split over threads)", {16, 64, 64, 32}, {{2, 2}, {2, 2}, {1, 1}, Padding::valid()}},
  };
  const int saved = intra_op_threads();
  for (int threads : {1, 3}) {
    set_intra_op_threads(threads);
    for (const Geometry& g : geometries)
      for (int values = 0; values < 3; ++values) {
        const std::string what = std::string(g.what) + ", values " + std::to_string(values) +
                                 ", " + std::to_string(threads) + " threads";
        const Window w = g.window;
        auto run = [&](bool fused) {
          // ReLU before the pool: the compiler folds its rule into the op's gradient
          // (relu_pool_grad.cc); the composite's gradient is patches_adjoint, left alone.
          auto pool = [w, fused](const Tensor& x) {
            const Tensor r = relu(x);
            return fused ? max_pool_window(r, w) : composite_max_pool(r, w);
          };
          return jit([pool](const Tensor& x, const Tensor& weights, const Tensor& t) {
            auto loss = [&](const Tensor& v) { return sum(pool(v) * weights); };
            auto [value, grad_x] = value_and_grad(loss)(x);
            auto [y, tangent] = jvp(pool, x, t);
            return std::tuple{pool(x), grad_x, tangent, value};
          });
        };
        const Array x = image(g.img, values, 11);
        const Array t = image(g.img, 0, 12);
        auto probe = jit([w](const Tensor& x) { return max_pool_window(x, w); });
        const Array weights = image(probe(x).shape(), 0, 13);
        auto [y1, g1, t1, v1] = run(true)(x, weights, t);
        auto [y0, g0, t0, v0] = run(false)(x, weights, t);
        expect_same_bits(y1, y0, what + ": value");
        expect_same_bits(g1, g0, what + ": gradient");
        expect_same_bits(t1, t0, what + ": tangent");
      }
  }
  set_intra_op_threads(saved);
}

// A convolution block's gradient: ReLU's rule is folded into the pool's gradient op, which the
// select alone read (the compiled graph has no select or compare left), and without the ReLU
// nothing is folded.
TEST(MaxPool, ReluRuleFoldsIntoThePoolsGradient) {
  for (bool with_relu : {true, false}) {
    auto step = jit([with_relu](const Tensor& x) {
      return grad([with_relu](const Tensor& v) {
        const Tensor h = with_relu ? relu(v) : v;
        return sum(square(max_pool(h, {2, 2}, {2, 2})));
      })(x);
    });
    const Array x = image({2, 4, 4, 3}, 0, 6);
    const Array g = step(x);
    int masked = 0, selects = 0;
    for (const Node& n : step.core().last_entry()->exe->graph->nodes()) {
      masked += n.op == Op::MaxPoolGrad && n.attrs.index != 0;
      selects += n.op == Op::Select;
    }
    EXPECT_EQ(masked, with_relu ? 1 : 0);
    EXPECT_EQ(selects, 0);
    // d/dx sum(max(relu(x))^2) = 2 max where x is its window's max and > 0, else 0.
    const float* xv = x.data<float>();
    for (int64_t i = 0; i < x.size(); ++i) {
      const int64_t c = i % 3, px = (i / 3) % 4, py = (i / 12) % 4, b = i / 48;
      float m = -INFINITY;
      for (int64_t dy = 0; dy < 2; ++dy)
        for (int64_t dx = 0; dx < 2; ++dx) {
          const float v = xv[((b * 4 + py / 2 * 2 + dy) * 4 + px / 2 * 2 + dx) * 3 + c];
          m = std::max(m, with_relu ? std::max(v, 0.0f) : v);
        }
      const float v = with_relu ? std::max(xv[i], 0.0f) : xv[i];
      const bool wins = v == m && (!with_relu || xv[i] > 0);
      EXPECT_EQ(g.data<float>()[i], wins ? 2 * m : 0.0f) << i;
    }
  }
}

// The one op replaces the composite's passes: the plan of a pooled step holds max_pool and
// max_pool_grad and no patches or reduce_max.
TEST(MaxPool, TheStepRunsTheOpsNotTheWindows) {
  auto step = jit([](const Tensor& x) {
    return grad([](const Tensor& v) { return sum(square(max_pool(v, {2, 2}, {2, 2}))); })(x);
  });
  const Array x = image({2, 4, 4, 3}, 0, 5);
  const Array g = step(x);
  int pools = 0, grads = 0;
  for (const Node& n : step.core().last_entry()->exe->graph->nodes()) {
    EXPECT_NE(n.op, Op::Patches);
    EXPECT_NE(n.op, Op::PatchesAdjoint);
    EXPECT_NE(n.op, Op::ReduceMax);
    pools += n.op == Op::MaxPool;
    grads += n.op == Op::MaxPoolGrad;
  }
  EXPECT_EQ(grads, 1);
  EXPECT_LE(pools, 1);  // the forward's value feeds the loss; its max is recomputed in the grad
  // d/dx sum(max^2) = 2 max at each window's maximum (no ties in these values), else 0.
  const float* xv = x.data<float>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t oy = 0; oy < 2; ++oy)
      for (int64_t ox = 0; ox < 2; ++ox)
        for (int64_t c = 0; c < 3; ++c) {
          float m = -INFINITY;
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 2; ++j)
              m = std::max(m, xv[((b * 4 + oy * 2 + i) * 4 + ox * 2 + j) * 3 + c]);
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 2; ++j) {
              const int64_t at = ((b * 4 + oy * 2 + i) * 4 + ox * 2 + j) * 3 + c;
              EXPECT_EQ(g.data<float>()[at], xv[at] == m ? 2 * m : 0.0f) << at;
            }
        }
}

TEST(MaxPool, BadCotangentIsATraceErrorNamingTheOpAndCallSite) {
  auto f = jit([](const Tensor& ct, const Tensor& x) {
    return max_pool_grad(ct, x, Window{{2, 2}, {2, 2}, {1, 1}, Padding::valid()});
  });
  const std::string msg = testing::error_of<TraceError>(
      [&] { f(Array::zeros(DType::f32, {1, 3, 3, 2}), Array::zeros(DType::f32, {1, 4, 4, 2})); });
  EXPECT_NE(msg.find("max_pool_grad"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[1,3,3,2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_pool_test.cc"), std::string::npos) << msg;
}

}  // namespace
}  // namespace fjit
