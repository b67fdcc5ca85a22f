// Second order and Jacobians (core/autodiff/jacobian.h), all in float64:
//  - an MLP's Hessian-vector product (forward over reverse) against central differences of
//    its gradient computed on the host in double (a hand-written backward pass), the oracle
//    independent of fjit;
//  - a Hessian-vector product through scan against central differences of fjit's reverse-mode
//    gradient through the scan (itself checked against finite differences by
//    tests/grad_check_test.cc), and against hessian(f) v;
//  - jacfwd against jacrev on a few functions, and jacfwd against finite differences;
//  - HVP through fori_loop; reverse over forward (grad of a jvp) in closed form;
//  - linearize against jvp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "parallel/fjit.h"
#include "tests/grad_cases.h"

namespace fjit {
namespace {

using grad_cases::In;
using grad_cases::make_input;

// The MLP: loss = 0.5 * sum((tanh(x w1 + b1) w2 + b2 - y)^2), x [N, I], w1 [I, H], w2 [H, O].
constexpr int N = 5, I = 3, H = 4, O = 2;

struct HostMlp {
  std::vector<double> x, y;  // [N, I], [N, O]
  // Gradient of the loss at p (w1, b1, w2, b2 flattened in that order), by hand.
  std::vector<double> grad(const std::vector<double>& p) const {
    const double *w1 = p.data(), *b1 = w1 + I * H, *w2 = b1 + H, *b2 = w2 + H * O;
    std::vector<double> g(p.size(), 0.0);
    double *gw1 = g.data(), *gb1 = gw1 + I * H, *gw2 = gb1 + H, *gb2 = gw2 + H * O;
    for (int n = 0; n < N; ++n) {
      double a[H], d[O];
      for (int h = 0; h < H; ++h) {
        double z = b1[h];
        for (int i = 0; i < I; ++i) z += x[n * I + i] * w1[i * H + h];
        a[h] = std::tanh(z);
      }
      for (int o = 0; o < O; ++o) {
        double out = b2[o];
        for (int h = 0; h < H; ++h) out += a[h] * w2[h * O + o];
        d[o] = out - y[n * O + o];
        gb2[o] += d[o];
        for (int h = 0; h < H; ++h) gw2[h * O + o] += a[h] * d[o];
      }
      for (int h = 0; h < H; ++h) {
        double da = 0;
        for (int o = 0; o < O; ++o) da += d[o] * w2[h * O + o];
        const double dz = da * (1 - a[h] * a[h]);
        gb1[h] += dz;
        for (int i = 0; i < I; ++i) gw1[i * H + h] += x[n * I + i] * dz;
      }
    }
    return g;
  }
};

const char* kNames[] = {"w1", "b1", "w2", "b2"};
const Shape kShapes[] = {{I, H}, {H}, {H, O}, {O}};

std::vector<double> flat(const ArrayDict& d) {
  std::vector<double> v;
  for (const char* k : kNames) {
    const Array& a = d.at(k);
    v.insert(v.end(), a.data<double>(), a.data<double>() + a.size());
  }
  return v;
}

ArrayDict dict_of(uint64_t seed) {
  ArrayDict d;
  for (int k = 0; k < 4; ++k) d.set(kNames[k], make_input(In{kShapes[k]}, seed + k));
  return d;
}

TEST(Hessian, MlpHvpMatchesHostGradientDifferences) {
  const Array x = make_input(In{{N, I}}, 1), y = make_input(In{{N, O}}, 2);
  const ArrayDict p = dict_of(10), v = dict_of(20);
  auto loss = [&](const Params& q) {
    Tensor h = tanh(matmul(constant(x), q["w1"]) + q["b1"]);
    Tensor r = matmul(h, q["w2"]) + q["b2"] - constant(y);
    return sum(r * r) * 0.5;
  };
  auto f = jit([&](const Params& q, const Params& t) { return hvp(loss)(q, t); });
  const ArrayDict hv = f(p, v);

  HostMlp host{std::vector<double>(x.data<double>(), x.data<double>() + x.size()),
               std::vector<double>(y.data<double>(), y.data<double>() + y.size())};
  const std::vector<double> p0 = flat(p), dv = flat(v), got = flat(hv);
  // The host gradient checks itself against fjit's: the oracle computes the right function.
  auto g = jit([&](const Params& q) { return grad(loss)(q); });
  const std::vector<double> fg = flat(g(p)), hg = host.grad(p0);
  for (size_t i = 0; i < hg.size(); ++i) ASSERT_NEAR(fg[i], hg[i], 1e-12 * (1 + std::abs(hg[i]))) << i;
  const double h = 1e-5;
  std::vector<double> up = p0, down = p0;
  for (size_t i = 0; i < p0.size(); ++i) {
    up[i] += h * dv[i];
    down[i] -= h * dv[i];
  }
  const std::vector<double> gu = host.grad(up), gd = host.grad(down);
  ASSERT_EQ(got.size(), p0.size());
  for (size_t i = 0; i < p0.size(); ++i) {
    const double fd = (gu[i] - gd[i]) / (2 * h);
    EXPECT_NEAR(got[i], fd, 1e-8 + 1e-7 * std::abs(fd)) << "(H v)[" << i << "]";
  }
}

// `hv` against central differences of the jitted gradient `g` at w along v (w and v [3]).
template <class G>
void expect_gradient_differences(const Array& hv, G& g, const Array& w, const Array& v) {
  const double h = 1e-5;
  Array wu = w.clone(), wd = w.clone();
  for (int i = 0; i < 3; ++i) {
    wu.data<double>()[i] += h * v.data<double>()[i];
    wd.data<double>()[i] -= h * v.data<double>()[i];
  }
  const Array gu = g(wu), gd = g(wd);
  for (int i = 0; i < 3; ++i) {
    const double fd = (gu.data<double>()[i] - gd.data<double>()[i]) / (2 * h);
    EXPECT_NEAR(hv.data<double>()[i], fd, 1e-8 + 1e-7 * std::abs(fd)) << i;
  }
}

// A loss through a scan: the carry, the rows and a captured weight all feed it.
Tensor scan_loss(const Tensor& w, const Tensor& xs) {
  auto [c, ys] = scan([&](const Tensor& c, const Tensor& r) {
    Tensor next = tanh(c * w + r) + sin(c);
    return std::pair{next, next * c};
  }, w * 0.5, xs);
  return sum(c * c) + sum(ys);
}

TEST(Hessian, HvpThroughScanMatchesGradientDifferences) {
  const Array xs = make_input(In{{4, 3}}, 3), w = make_input(In{{3}}, 4), v = make_input(In{{3}}, 5);
  auto loss = [&](const Tensor& w) { return scan_loss(w, constant(xs)); };
  auto f = jit([&](const Tensor& w, const Tensor& v) {
    return std::tuple{hvp(loss)(w, v), matmul(hessian(loss)(w), reshape(v, {3, 1}))};
  });
  auto g = jit([&](const Tensor& w) { return grad(loss)(w); });
  auto [hv, hmv] = f(w, v);
  expect_gradient_differences(hv, g, w, v);
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(hmv.data<double>()[i], hv.data<double>()[i], 1e-12 * (1 + std::abs(hv.data<double>()[i]))) << i;
}

// fori_loop is a scan over the trip count: its HVP too, against gradient differences.
TEST(Hessian, HvpThroughForiLoop) {
  auto loss = [](const Tensor& w) {
    Tensor c = fori_loop(0, 3, [&](const Tensor&, const Tensor& c) { return tanh(c * w) + c * 0.5; }, w);
    return sum(c * c);
  };
  const Array w = make_input(In{{3}}, 6), v = make_input(In{{3}}, 7);
  auto f = jit([&](const Tensor& w, const Tensor& v) { return hvp(loss)(w, v); });
  auto g = jit([&](const Tensor& w) { return grad(loss)(w); });
  const Array hv = f(w, v);
  expect_gradient_differences(hv, g, w, v);
}

// Reverse over forward: the gradient of <1, J t> for f = sin is -sin(x) t, in closed form.
TEST(Hessian, GradOfJvp) {
  auto f = jit([](const Tensor& x, const Tensor& t) {
    return grad([&](const Tensor& x) { return sum(jvp([](const Tensor& x) { return sin(x); }, x, t).second); })(x);
  });
  const Array x = make_input(In{{4}}, 1), t = make_input(In{{4}}, 2);
  const Array g = f(x, t);
  for (int e = 0; e < 4; ++e)
    EXPECT_NEAR(g.data<double>()[e], -std::sin(x.data<double>()[e]) * t.data<double>()[e], 1e-14) << e;
}

TEST(Hessian, JacfwdEqualsJacrev) {
  using Fn = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<Shape, Fn>> fns = {
      {{3}, [](const Tensor& x) { return sin(x) * sum(x * x); }},
      {{2, 3}, [](const Tensor& x) { return matmul(x, x, false, true); }},
      {{3}, [](const Tensor& x) { return reshape(scan_loss(x, constant(make_input(In{{2, 3}}, 9))), {1}); }},
      {{2, 2}, [](const Tensor& x) { return cond(sum(x) > -100.0, [](const Tensor& a) { return exp(a) * a; },
                                                 [](const Tensor& a) { return a; }, x); }},
  };
  for (size_t k = 0; k < fns.size(); ++k) {
    SCOPED_TRACE(k);
    const Shape& shape = fns[k].first;
    const Fn& fn = fns[k].second;
    auto f = jit([&](const Tensor& x) { return std::tuple{jacfwd(fn)(x), jacrev(fn)(x), fn(x)}; });
    auto fwd = jit([&](const Tensor& x) { return fn(x); });
    const Array x = make_input(In{shape}, 11 + k);
    auto [jf, jr, y] = f(x);
    ASSERT_EQ(jf.shape(), jr.shape());
    const int64_t m = y.size(), n = x.size();
    ASSERT_EQ(jf.size(), m * n);
    for (int64_t e = 0; e < jf.size(); ++e)
      EXPECT_NEAR(jf.data<double>()[e], jr.data<double>()[e], 1e-12 * (1 + std::abs(jr.data<double>()[e]))) << e;
    // Column j of the Jacobian against central differences along x_j.
    const double h = 1e-6;
    for (int64_t j = 0; j < n; ++j) {
      Array xu = x.clone(), xd = x.clone();
      xu.data<double>()[j] += h;
      xd.data<double>()[j] -= h;
      const Array yu = fwd(xu), yd = fwd(xd);
      for (int64_t i = 0; i < m; ++i) {
        const double fd = (yu.data<double>()[i] - yd.data<double>()[i]) / (2 * h);
        EXPECT_NEAR(jf.data<double>()[i * n + j], fd, 1e-6 + 1e-6 * std::abs(fd)) << i << "," << j;
      }
    }
  }
}

TEST(Hessian, LinearizeEqualsJvp) {
  auto fn = [](const Tensor& x) { return tanh(x) * exp(x * 0.3); };
  auto f = jit([&](const Tensor& x, const Tensor& t1, const Tensor& t2) {
    auto [y, f_jvp] = linearize(fn, x);
    return std::tuple{y, f_jvp(t1), f_jvp(t2), jvp(fn, x, t1).second, jvp(fn, x, t2).second};
  });
  const Array x = make_input(In{{4}}, 1), t1 = make_input(In{{4}}, 2), t2 = make_input(In{{4}}, 3);
  auto [y, a1, a2, b1, b2] = f(x, t1, t2);
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(a1.data<double>()[e], b1.data<double>()[e]) << e;
    EXPECT_EQ(a2.data<double>()[e], b2.data<double>()[e]) << e;
  }
}

}  // namespace
}  // namespace fjit
