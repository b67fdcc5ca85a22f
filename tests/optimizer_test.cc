// Optimizers against closed-form values worked out by hand in each test (float64, two steps
// so momentum and bias correction matter), and clip_by_global_norm on both branches.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/fjit.h"

namespace fjit {
namespace {

Array f64(std::vector<double> v) { return Array::from_vector(v); }

void expect_values(const Array& a, std::vector<double> expect, const char* what) {
  ASSERT_EQ(a.size(), static_cast<int64_t>(expect.size())) << what;
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_NEAR(a.data<double>()[i], expect[i], 1e-12) << what << "[" << i << "]";
}

// Runs `steps` updates of `opt` with the given gradient sequence; returns {params, state}.
template <class Opt>
std::pair<ArrayDict, ArrayDict> run(const Opt& opt, ArrayDict p, const std::vector<ArrayDict>& grads) {
  auto step = jit([opt](const Params& params, const Params& g, const Params& s) {
    auto [p2, s2] = opt.update(params, g, s);
    return std::tuple{p2, s2};
  });
  ArrayDict s = opt.init_state(p);
  for (const ArrayDict& g : grads) std::tie(p, s) = step(p, g, s);
  return {p, s};
}

const ArrayDict kParams = {{"w", f64({1.0, -2.0})}, {"b", f64({0.5})}};
const std::vector<ArrayDict> kGrads = {{{"w", f64({0.5, 0.25})}, {"b", f64({-1.0})}},
                                       {{"w", f64({-0.1, 0.3})}, {"b", f64({2.0})}}};

TEST(Optimizer, SgdPlain) {
  auto [p, s] = run(SGD{.lr = 0.1}, kParams, kGrads);
  EXPECT_TRUE(s.empty());
  expect_values(p["w"], {1.0 - 0.1 * (0.5 - 0.1), -2.0 - 0.1 * (0.25 + 0.3)}, "w");
  expect_values(p["b"], {0.5 - 0.1 * (-1.0 + 2.0)}, "b");
}

TEST(Optimizer, SgdMomentumWeightDecay) {
  const double lr = 0.1, mu = 0.9, wd = 0.01;
  auto [p, s] = run(SGD{.lr = lr, .momentum = mu, .weight_decay = wd}, kParams, kGrads);
  // Per coordinate: g1 = g1' + wd*p0; buf1 = g1; p1 = p0 - lr*buf1; g2 = g2' + wd*p1;
  // buf2 = mu*buf1 + g2; p2 = p1 - lr*buf2.
  auto by_hand = [&](double p0, double ga, double gb, double* buf) {
    const double g1 = ga + wd * p0, p1 = p0 - lr * g1, g2 = gb + wd * p1;
    *buf = mu * g1 + g2;
    return p1 - lr * *buf;
  };
  double m0, m1, mb;
  expect_values(p["w"], {by_hand(1.0, 0.5, -0.1, &m0), by_hand(-2.0, 0.25, 0.3, &m1)}, "w");
  expect_values(p["b"], {by_hand(0.5, -1.0, 2.0, &mb)}, "b");
  expect_values(s["m.w"], {m0, m1}, "m.w");
  expect_values(s["m.b"], {mb}, "m.b");
  EXPECT_EQ(s.names(), (std::vector<std::string>{"m.w", "m.b"}));
}

TEST(Optimizer, SgdNesterov) {
  const double lr = 0.1, mu = 0.9;
  auto [p, s] = run(SGD{.lr = lr, .momentum = mu, .nesterov = true}, kParams, kGrads);
  // b: g1 = -1; buf1 = -1; p1 = 0.5 - lr*(g1 + mu*buf1); g2 = 2; buf2 = mu*buf1 + g2;
  // p2 = p1 - lr*(g2 + mu*buf2).
  const double buf1 = -1.0, p1 = 0.5 - lr * (-1.0 + mu * buf1), buf2 = mu * buf1 + 2.0;
  expect_values(p["b"], {p1 - lr * (2.0 + mu * buf2)}, "b");
  expect_values(s["m.b"], {buf2}, "m.b");
}

TEST(Optimizer, SgdLearningRateAsATensorArgument) {
  auto step = jit([](const Params& params, const Params& g, const Tensor& lr) {
    return SGD{.lr = lr}.update(params, g, {}).first;
  });
  ArrayDict p = step(kParams, kGrads[0], Array::scalar<double>(0.5));
  expect_values(p["w"], {1.0 - 0.25, -2.0 - 0.125}, "w");
}

// One Adam coordinate after the given gradients, by the textbook formula.
double adam_by_hand(double p, std::vector<double> gs, double lr, double b1, double b2, double eps,
                    double wd, bool decoupled) {
  double m = 0, v = 0;
  for (size_t t = 1; t <= gs.size(); ++t) {
    double g = gs[t - 1];
    if (decoupled) p *= 1 - lr * wd;
    else g += wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / (1 - std::pow(b1, double(t))), vhat = v / (1 - std::pow(b2, double(t)));
    p -= lr * mhat / (std::sqrt(vhat) + eps);
  }
  return p;
}

TEST(Optimizer, Adam) {
  Adam opt{.lr = 0.01, .b1 = 0.8, .b2 = 0.9, .eps = 1e-3};
  auto [p, s] = run(opt, kParams, kGrads);
  expect_values(p["w"], {adam_by_hand(1.0, {0.5, -0.1}, 0.01, 0.8, 0.9, 1e-3, 0, false),
                         adam_by_hand(-2.0, {0.25, 0.3}, 0.01, 0.8, 0.9, 1e-3, 0, false)}, "w");
  expect_values(p["b"], {adam_by_hand(0.5, {-1.0, 2.0}, 0.01, 0.8, 0.9, 1e-3, 0, false)}, "b");
  EXPECT_EQ(s.names(), (std::vector<std::string>{"m.w", "m.b", "v.w", "v.b", "step"}));
  EXPECT_EQ(s["step"].item<int32_t>(), 2);
  expect_values(s["m.b"], {0.8 * 0.2 * -1.0 + 0.2 * 2.0}, "m.b");
  expect_values(s["v.b"], {0.9 * 0.1 * 1.0 + 0.1 * 4.0}, "v.b");
}

TEST(Optimizer, AdamW) {
  AdamW opt{.lr = 0.01, .b1 = 0.8, .b2 = 0.9, .eps = 1e-3, .weight_decay = 0.1};
  auto [p, s] = run(opt, kParams, kGrads);
  expect_values(p["w"], {adam_by_hand(1.0, {0.5, -0.1}, 0.01, 0.8, 0.9, 1e-3, 0.1, true),
                         adam_by_hand(-2.0, {0.25, 0.3}, 0.01, 0.8, 0.9, 1e-3, 0.1, true)}, "w");
  expect_values(p["b"], {adam_by_hand(0.5, {-1.0, 2.0}, 0.01, 0.8, 0.9, 1e-3, 0.1, true)}, "b");
}

TEST(Optimizer, AdamWithL2WeightDecay) {
  Adam opt{.lr = 0.01, .weight_decay = 0.1};
  auto [p, s] = run(opt, kParams, kGrads);
  expect_values(p["b"], {adam_by_hand(0.5, {-1.0, 2.0}, 0.01, 0.9, 0.999, 1e-8, 0.1, false)}, "b");
}

// One Lion coordinate after the given gradients, by the paper's formula; *m_out its moment.
double lion_by_hand(double p, std::vector<double> gs, double lr, double b1, double b2, double wd,
                    double* m_out) {
  double m = 0;
  for (double g : gs) {
    const double c = b1 * m + (1 - b1) * g;
    p = p * (1 - lr * wd) - lr * (c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0);
    m = b2 * m + (1 - b2) * g;
  }
  *m_out = m;
  return p;
}

TEST(Optimizer, Lion) {
  for (double wd : {0.0, 0.5}) {
    Lion opt{.lr = 0.01, .b1 = 0.8, .b2 = 0.9, .weight_decay = wd};
    auto [p, s] = run(opt, kParams, kGrads);
    double m0, m1, mb;
    expect_values(p["w"], {lion_by_hand(1.0, {0.5, -0.1}, 0.01, 0.8, 0.9, wd, &m0),
                           lion_by_hand(-2.0, {0.25, 0.3}, 0.01, 0.8, 0.9, wd, &m1)}, "w");
    expect_values(p["b"], {lion_by_hand(0.5, {-1.0, 2.0}, 0.01, 0.8, 0.9, wd, &mb)}, "b");
    expect_values(s["m.w"], {m0, m1}, "m.w");
    expect_values(s["m.b"], {mb}, "m.b");
    EXPECT_EQ(s.names(), (std::vector<std::string>{"m.w", "m.b"}));
  }
}

TEST(Optimizer, ClipByGlobalNorm) {
  // ||(3, 0, 4)|| = 5.
  const ArrayDict g = {{"a", f64({3.0, 0.0})}, {"b", f64({4.0})}};
  auto clip = jit([](const Params& grads, const Tensor& max_norm) {
    Tensor norm;
    TensorDict out = clip_by_global_norm(grads, max_norm, &norm);
    return std::tuple{out, norm};
  });
  auto [kept, n1] = clip(g, Array::scalar<double>(10.0));  // below the limit: unchanged
  EXPECT_DOUBLE_EQ(n1.item<double>(), 5.0);
  expect_values(kept["a"], {3.0, 0.0}, "a");
  expect_values(kept["b"], {4.0}, "b");
  auto [clipped, n2] = clip(g, Array::scalar<double>(2.5));  // above: scaled by 2.5 / 5
  EXPECT_DOUBLE_EQ(n2.item<double>(), 5.0);
  expect_values(clipped["a"], {1.5, 0.0}, "a");
  expect_values(clipped["b"], {2.0}, "b");
  // A zero gradient stays zero (no 0/0 in the branch not taken).
  auto [zero, n3] = clip(ArrayDict{{"a", f64({0.0})}}, Array::scalar<double>(0.0));
  expect_values(zero["a"], {0.0}, "zero");
}

TEST(Optimizer, DescribeNamesEveryHyperparameter) {
  EXPECT_EQ(describe(AdamW{.lr = 3e-4}),
            "AdamW(lr=0.0003, b1=0.9, b2=0.999, eps=1e-08, weight_decay=0.01)");
  TraceContext ctx{{}};
  const Tensor lr = ctx.parameter(DType::f32, {}, "lr");
  EXPECT_EQ(describe(SGD{.lr = lr, .momentum = 0.9}),
            "SGD(lr=traced, momentum=0.9, nesterov=0, weight_decay=0)");
}

TEST(Optimizer, MissingStateIsATraceError) {
  auto step = jit([](const Params& p, const Params& g, const Params& s) {
    return Adam{}.update(p, g, s).first;
  });
  try {
    step(kParams, kGrads[0], ArrayDict{{"step", Array::scalar<int32_t>(0)}});
    ADD_FAILURE() << "expected a TraceError";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("'m.w'"), std::string::npos) << e.what();
  }
}

// Long runs in float32: the bias corrections must not be rounded to f32 (b2^t near 1 loses
// the digits that 1 - b2^t keeps). fjit's f32 Adam is compared with a float64 oracle and must
// be about as close as a plain f32 loop that keeps the corrections in double.
TEST(Optimizer, AdamFloat32StaysAsCloseToFloat64AsAPlainLoop) {
  const int steps = 3000, n = 8;
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  auto grad = [](int t, int i) { return std::sin(0.37 * t + 1.3 * i) * (1.0 + 0.5 * i); };
  std::vector<double> oracle(n), m64(n), v64(n);
  std::vector<float> plain(n), m32(n), v32(n);
  for (int i = 0; i < n; ++i) plain[i] = static_cast<float>(oracle[i] = 0.1 * (i + 1));
  std::vector<Array> grads;
  for (int t = 1; t <= steps; ++t) {
    std::vector<float> g32(n);
    const double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
    for (int i = 0; i < n; ++i) {
      const double g = static_cast<float>(grad(t, i));  // both see the f32 gradient
      g32[i] = static_cast<float>(g);
      m64[i] = b1 * m64[i] + (1 - b1) * g;
      v64[i] = b2 * v64[i] + (1 - b2) * g * g;
      oracle[i] -= lr / c1 * m64[i] / (std::sqrt(v64[i]) / std::sqrt(c2) + eps);
      m32[i] = static_cast<float>(b1) * m32[i] + static_cast<float>(1 - b1) * g32[i];
      v32[i] = static_cast<float>(b2) * v32[i] + static_cast<float>(1 - b2) * g32[i] * g32[i];
      plain[i] -= static_cast<float>(lr / c1) * m32[i] /
                  (std::sqrt(v32[i]) * static_cast<float>(1 / std::sqrt(c2)) + static_cast<float>(eps));
    }
    grads.push_back(Array::from_vector<float>(g32, {n}));
  }
  std::vector<float> start(n);
  for (int i = 0; i < n; ++i) start[i] = static_cast<float>(0.1 * (i + 1));
  const Adam opt{.lr = lr, .b1 = b1, .b2 = b2, .eps = eps};
  auto step = jit([opt](const Params& p, const Params& g, const Params& s) {
    auto [p2, s2] = opt.update(p, g, s);
    return std::tuple{p2, s2};
  });
  ArrayDict p = {{"w", Array::from_vector<float>(start, {n})}};
  ArrayDict s = opt.init_state(p);
  for (const Array& g : grads) std::tie(p, s) = step(p, ArrayDict{{"w", g}}, s);
  double err_fjit = 0, err_plain = 0;
  const std::vector<float> got = p["w"].to_vector<float>();
  for (int i = 0; i < n; ++i) {
    err_fjit = std::max(err_fjit, std::abs(got[i] - oracle[i]));
    err_plain = std::max(err_plain, std::abs(plain[i] - oracle[i]));
  }
  EXPECT_LE(err_fjit, 3 * err_plain + 1e-7) << "fjit " << err_fjit << ", plain f32 loop " << err_plain;
}

}  // namespace
}  // namespace fjit
