// Reverse mode through scan, fori_loop, cond and custom_vjp, in float64: against central
// finite differences and against the same computation unrolled with a C++ loop.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "parallel/fjit.h"
#include "tests/control_flow_testing.h"

namespace fjit {
namespace {

using testing::ramp;
using testing::row;

// Central differences of the scalar f at each element of args[which], h = 1e-6.
std::vector<double> finite_differences(const std::function<double(const std::vector<Array>&)>& f,
                                       std::vector<Array> args, size_t which) {
  std::vector<double> g;
  const double h = 1e-6;
  for (int64_t i = 0; i < args[which].size(); ++i) {
    double& v = args[which].data<double>()[i];
    const double v0 = v;
    v = v0 + h;
    const double up = f(args);
    v = v0 - h;
    const double down = f(args);
    v = v0;
    g.push_back((up - down) / (2 * h));
  }
  return g;
}

void expect_close(const Array& got, const std::vector<double>& want, double tol, const std::string& what) {
  const std::vector<double> g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], want[i], tol * (1 + std::abs(want[i]))) << what << "[" << i << "]";
}

// A loss through an RNN: every kind of scan input gets a gradient (carry, xs, the captured w),
// and the ys and the final carry both reach the loss.
Tensor rnn_loss(const Tensor& w, const Tensor& h0, const Tensor& xs, bool unrolled) {
  auto cell = [&](const Tensor& h, const Tensor& x) {
    Tensor next = tanh(matmul(h, w) + x);
    return std::pair{next, sum(next * next)};
  };
  Tensor h, ys;
  if (unrolled) {
    h = h0;
    std::vector<Tensor> parts;
    for (int64_t i = 0; i < xs.dim(0); ++i) {
      auto [next, y] = cell(h, row(xs, i));
      h = next;
      parts.push_back(reshape(y, {1}));
    }
    ys = concat(parts, 0);
  } else {
    std::tie(h, ys) = scan(cell, h0, xs);
  }
  Tensor weights = iota(DType::f64, {xs.dim(0)}) + 1.0;
  return sum(ys * weights) + sum(sin(h));
}

TEST(ScanGrad, MatchesFiniteDifferencesAndTheUnrolledLoop) {
  const std::vector<Array> args = {ramp({3, 3}, 0.6), ramp({1, 3}, 0.9), ramp({5, 1, 3}, 0.7, 1.3)};
  auto grads = [](bool unrolled) {
    return jit([unrolled](const Tensor& w, const Tensor& h0, const Tensor& xs) {
      auto [loss, g] = value_and_grad([unrolled](const Tensor& w, const Tensor& h0, const Tensor& xs) {
        return rnn_loss(w, h0, xs, unrolled);
      }, argnums<0, 1, 2>)(w, h0, xs);
      return std::tuple{loss, std::get<0>(g), std::get<1>(g), std::get<2>(g)};
    });
  };
  auto scanned = grads(false), unrolled = grads(true);
  auto [l, gw, gh, gx] = scanned(args[0], args[1], args[2]);
  auto [lu, gwu, ghu, gxu] = unrolled(args[0], args[1], args[2]);
  // The backward pass is a loop too: the plan holds the forward and the backward scan.
  int loops = 0;
  for (const Instr& in : scanned.core().last_entry()->exe->instrs) loops += in.op == Op::Scan;
  EXPECT_EQ(loops, 2);
  EXPECT_EQ(l.item<double>(), lu.item<double>());
  expect_close(gw, gwu.to_vector<double>(), 1e-12, "dw vs unrolled");
  expect_close(gh, ghu.to_vector<double>(), 1e-12, "dh0 vs unrolled");
  expect_close(gx, gxu.to_vector<double>(), 1e-12, "dxs vs unrolled");
  auto value = jit([](const Tensor& w, const Tensor& h0, const Tensor& xs) { return rnn_loss(w, h0, xs, false); });
  auto f = [&](const std::vector<Array>& a) { return value(a[0], a[1], a[2]).item<double>(); };
  expect_close(gw, finite_differences(f, args, 0), 1e-6, "dw vs finite differences");
  expect_close(gh, finite_differences(f, args, 1), 1e-6, "dh0 vs finite differences");
  expect_close(gx, finite_differences(f, args, 2), 1e-6, "dxs vs finite differences");
}

TEST(ScanGrad, ForiLoopAndNestedScans) {
  // x -> fori_loop of x <- sin(x) * a + i/10, then a nested scan summing squares.
  auto loss = [](const Tensor& x, const Tensor& a) {
    Tensor y = fori_loop(0, 4, [&](const Tensor& i, const Tensor& v) {
      return sin(v) * a + cast(i, DType::f64) * 0.1;
    }, x);
    Tensor m = reshape(y, {2, 2});
    auto [total, ys] = scan([](const Tensor& c, const Tensor& r) {
      auto [inner, unused] = scan([](const Tensor& c, const Tensor& v) { return std::pair{c + v * v, v}; }, c, r);
      return std::pair{inner, inner};
    }, scalar(DType::f64, 0.0), m);
    return total + sum(ys);
  };
  const std::vector<Array> args = {ramp({4}, 0.8), ramp({4}, 1.1, 0.9)};
  auto g = jit([&](const Tensor& x, const Tensor& a) {
    auto [gx, ga] = grad(loss, argnums<0, 1>)(x, a);
    return std::tuple{gx, ga};
  });
  auto value = jit(loss);
  auto [gx, ga] = g(args[0], args[1]);
  auto f = [&](const std::vector<Array>& a) { return value(a[0], a[1]).item<double>(); };
  expect_close(gx, finite_differences(f, args, 0), 1e-6, "dx");
  expect_close(ga, finite_differences(f, args, 1), 1e-6, "da");
}

TEST(CondGrad, FlowsThroughTheTakenBranch) {
  auto loss = [](const Tensor& p, const Tensor& x, const Tensor& k) {
    Tensor y = cond(p > 0.0, [&](const Tensor& x) { return exp(x) * k; }, [&](const Tensor& x) { return x * x * x; }, x);
    return sum(y * y);
  };
  auto g = jit([&](const Tensor& p, const Tensor& x, const Tensor& k) {
    auto [gx, gk] = grad([&](const Tensor& x, const Tensor& k) { return loss(p, x, k); }, argnums<0, 1>)(x, k);
    return std::tuple{gx, gk};
  });
  const Array x = ramp({3}, 0.9), k = Array::scalar<double>(1.7);
  const std::vector<double> xv = x.to_vector<double>();
  for (double p : {1.0, -1.0}) {
    SCOPED_TRACE(p > 0 ? "true branch" : "false branch");
    auto [gx, gk] = g(Array::scalar<double>(p), x, k);
    std::vector<double> want_x;
    double want_k = 0;
    for (double v : xv) {  // closed forms of d/dx sum(y^2)
      if (p > 0) {
        want_x.push_back(2 * std::exp(v) * 1.7 * std::exp(v) * 1.7);
        want_k += 2 * std::exp(v) * 1.7 * std::exp(v);
      } else {
        want_x.push_back(6 * std::pow(v, 5));
      }
    }
    expect_close(gx, want_x, 1e-14, "dx");
    expect_close(gk, {want_k}, 1e-14, "dk");
  }
}

// softplus(x) = log(1 + e^x), written stably: max(x, 0) + log1p(exp(-|x|)), with the
// hand-written gradient sigmoid(x) from the residual. The bwd multiplies by `scale`, so a
// test can tell the user's rule from autodiff of fwd.
auto softplus_with(double scale) {
  return custom_vjp(
      [](const Tensor& x) {
        Tensor y = maximum(x, zeros_like(x)) + log1p(exp(-abs(x)));
        return std::pair{y, sigmoid(x)};
      },
      [scale](const Tensor& s, const Tensor& ct) { return ct * s * scale; });
}

TEST(CustomVjp, StableSoftplusMatchesFiniteDifferencesAndRunsTheUsersRule) {
  const Array x = Array::from_vector<double>({-800, -3, -0.5, 0.25, 2, 40, 800}, {7});
  auto value = jit([](const Tensor& x) { return softplus_with(1.0)(x); });
  auto g = jit([](const Tensor& x) { return grad([](const Tensor& x) { return sum(softplus_with(1.0)(x)); })(x); });
  auto g3 = jit([](const Tensor& x) { return grad([](const Tensor& x) { return sum(softplus_with(3.0)(x)); })(x); });
  const std::vector<double> y = value(x).to_vector<double>(), d = g(x).to_vector<double>(),
                            d3 = g3(x).to_vector<double>();
  const std::vector<double> xv = x.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double s = 1 / (1 + std::exp(-xv[i]));
    EXPECT_TRUE(std::isfinite(y[i])) << xv[i];
    EXPECT_NEAR(d[i], s, 1e-15) << xv[i];
    EXPECT_NEAR(d3[i], 3 * s, 1e-15) << xv[i];  // the user's bwd, not autodiff of fwd
  }
  EXPECT_EQ(y.back(), 800.0);
  // Finite differences where they are meaningful (|x| small enough for h = 1e-6).
  auto f = [&](const std::vector<Array>& a) {
    double total = 0;
    for (double v : value(a[0]).to_vector<double>()) total += v;
    return total;
  };
  const Array mid = Array::from_vector<double>({-3, -0.5, 0.25, 2}, {4});
  const std::vector<double> fd = finite_differences(f, {mid}, 0);
  expect_close(g(mid), fd, 1e-8, "d softplus vs finite differences");
}

TEST(CustomVjp, GradientClippingIdentityInsideAScan) {
  // clip_grad(x) = x forward; backward clips the cotangent to [-1, 1].
  auto clip_grad = custom_vjp([](const Tensor& x) { return std::pair{x, std::vector<Tensor>{}}; },
                              [](const std::vector<Tensor>&, const Tensor& ct) {
                                return minimum(maximum(ct, full(DType::f64, {}, -1.0)), full(DType::f64, {}, 1.0));
                              });
  auto g = jit([&](const Tensor& x) {
    return grad([&](const Tensor& x) {
      auto [c, ys] = scan([&](const Tensor& c, const Tensor& v) { return std::pair{c + clip_grad(v) * 4.0, v}; },
                          scalar(DType::f64, 0.0), x);
      return c * 0.1 + sum(clip_grad(x) * 3.0);
    })(x);
  });
  // d/dx: 0.1 * clip(4 * 1) ... the inner cotangent of clip_grad(v) is 0.1 * 4 = 0.4 (not
  // clipped), the outer one is 3 (clipped to 1): 0.4 + 1.
  const std::vector<double> d = g(ramp({3}, 1.0)).to_vector<double>();
  for (double v : d) EXPECT_NEAR(v, 1.4, 1e-15);
}

}  // namespace
}  // namespace fjit
