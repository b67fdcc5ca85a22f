// Convolution, pooling, normalization and activations against independent oracles: direct
// convolution and pooling loops, closed forms, and a synchronized batch norm that must not
// depend on how the batch is split over replicas.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::random_f64;

// Resolved padding (top, left) and output extents, as the SAME/VALID rules define them.
struct Geo { int64_t oh, ow, top, left; };
Geo geometry(int64_t h, int64_t w, int64_t kh, int64_t kw, std::array<int64_t, 2> s,
             std::array<int64_t, 2> d, const Padding& p) {
  const int64_t sh = (kh - 1) * d[0] + 1, sw = (kw - 1) * d[1] + 1;
  if (p.kind == Padding::kSame) {
    const int64_t oh = (h + s[0] - 1) / s[0], ow = (w + s[1] - 1) / s[1];
    const int64_t th = std::max<int64_t>((oh - 1) * s[0] + sh - h, 0);
    const int64_t tw = std::max<int64_t>((ow - 1) * s[1] + sw - w, 0);
    return {oh, ow, th / 2, tw / 2};
  }
  const int64_t t = p.top, b = p.bottom, l = p.left, r = p.right;
  return {(h + t + b - sh) / s[0] + 1, (w + l + r - sw) / s[1] + 1, t, l};
}

// Direct convolution: out[n,y,x,o] = sum over taps and the group's channels.
Array direct_conv(const Array& x, const Array& w, const ConvOptions& o) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const int64_t n = xs[0], h = xs[1], wd = xs[2], c = xs[3], kh = ws[0], kw = ws[1];
  const int64_t cg = ws[2], oc = ws[3], og = oc / o.groups;
  const Geo g = geometry(h, wd, kh, kw, o.strides, o.dilation, o.padding);
  Array out(DType::f64, {n, g.oh, g.ow, oc});
  const double* X = x.data<double>();
  const double* W = w.data<double>();
  double* Y = out.data<double>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t y = 0; y < g.oh; ++y)
      for (int64_t xx = 0; xx < g.ow; ++xx)
        for (int64_t f = 0; f < oc; ++f) {
          const int64_t grp = f / og;
          double acc = 0;
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t iy = y * o.strides[0] - g.top + i * o.dilation[0];
              const int64_t ix = xx * o.strides[1] - g.left + j * o.dilation[1];
              if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
              for (int64_t k = 0; k < cg; ++k)
                acc += X[((b * h + iy) * wd + ix) * c + grp * cg + k] *
                       W[((i * kw + j) * cg + k) * oc + f];
            }
          Y[((b * g.oh + y) * g.ow + xx) * oc + f] = acc;
        }
  return out;
}

void expect_near(const Array& got, const Array& want, double tol) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got.at_as_double(i), want.at_as_double(i), tol) << "element " << i;
}

TEST(Nn, Conv2dMatchesDirectConvolution) {
  struct C { Shape x, w; ConvOptions o; };
  const C cases[] = {
      {{2, 6, 7, 3}, {3, 3, 3, 5}, {}},
      {{2, 6, 7, 3}, {3, 3, 3, 5}, {{1, 1}, Padding::same()}},
      {{1, 9, 8, 2}, {3, 2, 2, 4}, {{2, 3}, Padding::same()}},
      {{1, 9, 9, 2}, {3, 3, 2, 3}, {{1, 2}, Padding::explicit_pads(2, 0, 1, 3), {2, 1}}},
      {{2, 5, 5, 6}, {2, 2, 2, 9}, {{1, 1}, Padding::same(), {1, 1}, 3}},  // groups
      {{1, 5, 5, 4}, {3, 3, 1, 4}, {{1, 1}, Padding::same(), {1, 1}, 4}},  // depthwise
      {{3, 28, 28, 1}, {5, 5, 1, 8}, {{1, 1}, Padding::same()}},
  };
  for (const C& c : cases) {
    const Array x = random_f64(c.x, 1), w = random_f64(c.w, 2);
    auto f = jit([o = c.o](const Tensor& x, const Tensor& w) { return conv2d(x, w, o); });
    expect_near(f(x, w), direct_conv(x, w, c.o), 1e-12);
  }
}

TEST(Nn, PoolingMatchesDirectLoops) {
  const Array x = random_f64({2, 7, 6, 3}, 3);
  for (Padding p : {Padding::valid(), Padding::same()}) {
    const std::array<int64_t, 2> win{3, 2}, st{2, 2};
    auto mx = jit([&](const Tensor& t) { return max_pool(t, win, st, p); });
    auto av = jit([&](const Tensor& t) { return avg_pool(t, win, st, p); });
    const Array got_max = mx(x), got_avg = av(x);
    const Geo g = geometry(7, 6, 3, 2, st, {1, 1}, p);
    ASSERT_EQ(got_max.shape(), (Shape{2, g.oh, g.ow, 3}));
    const double* X = x.data<double>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t y = 0; y < g.oh; ++y)
        for (int64_t xx = 0; xx < g.ow; ++xx)
          for (int64_t c = 0; c < 3; ++c) {
            double m = -INFINITY, s = 0;
            int count = 0;
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t j = 0; j < 2; ++j) {
                const int64_t iy = y * 2 - g.top + i, ix = xx * 2 - g.left + j;
                if (iy < 0 || iy >= 7 || ix < 0 || ix >= 6) continue;
                const double v = X[((b * 7 + iy) * 6 + ix) * 3 + c];
                m = std::max(m, v), s += v, ++count;
              }
            const int64_t at = ((b * g.oh + y) * g.ow + xx) * 3 + c;
            EXPECT_EQ(got_max.at_as_double(at), m);
            EXPECT_NEAR(got_avg.at_as_double(at), s / count, 1e-15);
          }
  }
}

TEST(Nn, GeluAndLayerNormClosedForms) {
  const Array x = random_f64({4, 6}, 4);
  auto f = jit([](const Tensor& x) { return std::tuple{gelu(x), gelu(x, true)}; });
  auto [exact, approx] = f(x);
  for (int64_t i = 0; i < x.size(); ++i) {
    const double v = x.data<double>()[i];
    EXPECT_NEAR(exact.data<double>()[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-15);
    const double t = std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v));
    EXPECT_NEAR(approx.data<double>()[i], 0.5 * v * (1 + t), 1e-15);
  }
  auto ln = jit([](const Tensor& x, const Tensor& g, const Tensor& b) { return layer_norm(x, g, b, 0.0); });
  const Array g = Array::full(DType::f64, {6}, 2.0), b = Array::full(DType::f64, {6}, 0.5);
  const Array y = ln(x, g, b);
  for (int64_t r = 0; r < 4; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < 6; ++c) m += (y.data<double>()[r * 6 + c] - 0.5) / 2 / 6;
    for (int64_t c = 0; c < 6; ++c) {
      const double z = (y.data<double>()[r * 6 + c] - 0.5) / 2 - m;
      v += z * z / 6;
    }
    EXPECT_NEAR(m, 0.0, 1e-14);
    EXPECT_NEAR(v, 1.0, 1e-12);
  }
}

TEST(Nn, StopGradientBlocksOnlyItsPath) {
  // d/dx [x * stop_gradient(x^2)] = x^2 (the stopped factor is a constant), not 3 x^2.
  auto f = jit(grad([](const Tensor& x) { return sum(x * stop_gradient(x * x)); }));
  const Array x = random_f64({5}, 5);
  const Array g = f(x);
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(g.data<double>()[i], x.data<double>()[i] * x.data<double>()[i]);
}

TEST(Nn, BatchNormTrainingEvalAndRunningStatistics) {
  const Array x = random_f64({8, 3, 3, 4}, 6);
  const Array gamma = Array::full(DType::f64, {4}, 1.0), beta = Array::zeros(DType::f64, {4});
  const Array rm = Array::full(DType::f64, {4}, 0.2), rv = Array::full(DType::f64, {4}, 3.0);
  auto train = jit([](const Tensor& x, const Tensor& g, const Tensor& b, const Tensor& m,
                      const Tensor& v) {
    BatchNormResult r = batch_norm(x, g, b, m, v, {true, 0.75});
    return std::tuple{r.y, r.running_mean, r.running_var};
  });
  auto [y, m2, v2] = train(x, gamma, beta, rm, rv);
  for (int64_t c = 0; c < 4; ++c) {
    double mean = 0, var = 0, ym = 0, yv = 0;
    const int64_t n = 8 * 9;
    for (int64_t i = 0; i < n; ++i) mean += x.data<double>()[i * 4 + c] / n;
    for (int64_t i = 0; i < n; ++i) {
      const double d = x.data<double>()[i * 4 + c] - mean;
      var += d * d / n;
      ym += y.data<double>()[i * 4 + c] / n;
    }
    for (int64_t i = 0; i < n; ++i) yv += std::pow(y.data<double>()[i * 4 + c] - ym, 2) / n;
    EXPECT_NEAR(ym, 0.0, 1e-14);
    EXPECT_NEAR(yv, var / (var + 1e-5), 1e-12);
    EXPECT_NEAR(m2.data<double>()[c], 0.75 * 0.2 + 0.25 * mean, 1e-15);
    EXPECT_NEAR(v2.data<double>()[c], 0.75 * 3.0 + 0.25 * var, 1e-14);
  }
  auto eval = jit([](const Tensor& x, const Tensor& g, const Tensor& b, const Tensor& m,
                     const Tensor& v) { return batch_norm(x, g, b, m, v, {false}).y; });
  const Array ye = eval(x, gamma, beta, rm, rv);
  for (int64_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(ye.data<double>()[i], (x.data<double>()[i] - 0.2) / std::sqrt(3.0 + 1e-5), 1e-15);
}

TEST(Nn, SynchronizedBatchNormDoesNotDependOnTheSplit) {
  // 10 rows over 1, 2 (5/5) and 3 (4/3/3) thread replicas: the same outputs, running
  // statistics and gradients (pmean of each replica's gradient of its rows' mean loss: the
  // gradient of the whole batch's mean loss), to float64 rounding.
  const Array x = random_f64({10, 2, 2, 3}, 7);
  const Array gamma = random_f64({3}, 8), beta = random_f64({3}, 9);
  const Array rm = Array::zeros(DType::f64, {3}), rv = Array::full(DType::f64, {3}, 1.0);
  auto run = [&](int replicas) {
    Mesh mesh = Mesh::threads(replicas);
    auto step = pmap(mesh, "r", [](const Tensor& x, const Tensor& g, const Tensor& b,
                                   const Tensor& m, const Tensor& v) {
      BatchNormOptions o;
      o.axis_name = "r";
      auto loss = [&](const Tensor& gg) {
        return mean(square(batch_norm(x, gg, b, m, v, o).y * 1.5 + 0.25));  // this replica's rows
      };
      BatchNormResult r = batch_norm(x, g, b, m, v, o);
      // y is split with the rows: its sum of cubes over every replica's rows stands for it.
      return std::tuple{psum(sum(r.y * r.y * r.y, {0, 1, 2}), "r"), r.running_mean, r.running_var,
                        pmean(grad(loss)(g), "r")};
    }, {}, {{1, 2, 3, 4}});
    return step(x, gamma, beta, rm, rv);
  };
  auto [y1, m1, v1, g1] = run(1);
  for (int replicas : {2, 3}) {
    SCOPED_TRACE(replicas);
    auto [y, m, v, g] = run(replicas);
    expect_near(y, y1, 1e-14);
    expect_near(m, m1, 1e-15);
    expect_near(v, v1, 1e-15);
    expect_near(g, g1, 1e-14);
  }
}

TEST(Nn, BadShapesAreTraceErrorsNamingTheLayerAndCallSite) {
  auto f = jit([](const Tensor& x, const Tensor& w) { return conv2d(x, w); });
  const std::string msg = testing::error_of<TraceError>(
      [&] { f(Array::zeros(DType::f32, {1, 5, 5, 3}), Array::zeros(DType::f32, {3, 3, 2, 4})); });
  EXPECT_NE(msg.find("conv2d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[3,3,2,4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nn_test.cc"), std::string::npos) << msg;
  auto p = jit([](const Tensor& x) { return max_pool(x, {4, 4}, {1, 1}); });
  const std::string big = testing::error_of<TraceError>([&] { p(Array::zeros(DType::f32, {1, 3, 3, 1})); });
  EXPECT_NE(big.find("max_pool"), std::string::npos) << big;
  EXPECT_NE(big.find("larger than the padded image"), std::string::npos) << big;
}

}  // namespace
}  // namespace fjit
