// The autodiff API: errors, unused-parameter reports, has_aux, argnums, tied weights, the
// closed-form gradient of softmax cross entropy, and the shape of gradient graphs.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/fjit.h"
#include "core/lib/initializers.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

Array f64(std::vector<double> v, Shape s) { return Array::from_vector(v, std::move(s)); }

// Expects `fn` to throw a TraceError whose message contains every one of `parts`.
template <class Fn>
void expect_trace_error(Fn fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a TraceError";
  } catch (const TraceError& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(Autodiff, NonScalarOutputIsAnError) {
  auto f = jit([](const Tensor& x) { return grad([](const Tensor& v) { return v * 2.0; })(x); });
  expect_trace_error([&] { f(f64({1, 2}, {2})); }, {"scalar", "f64[2]", "autodiff_test.cc"});
}

TEST(Autodiff, IntegerInputIsAnError) {
  auto f = jit([](const Tensor& x, const Tensor& i) {
    return grad([](const Tensor& v, const Tensor& k) { return sum(v * cast(k, DType::f64)); },
                argnums<1>)(x, i);
  });
  expect_trace_error([&] { f(f64({1, 2}, {2}), Array::from_vector(std::vector<int32_t>{1, 2})); },
                     {"arg1", "i32[2]", "floating-point", "autodiff_test.cc"});
}

Tensor partial_loss(const Params& p, const Tensor& x) { return sum(matmul(x, p["w1"]) * p["b1"]); }

ArrayDict partial_params() {
  return {{"w1", f64({1, 2, 3, 4}, {2, 2})}, {"b1", f64({1, -1}, {2})}, {"w3", f64({5, 6}, {2})}};
}

TEST(Autodiff, UnusedParameterWarnsByNameAndGetsZeros) {
  testing::LogCapture logs;
  auto step = jit([](const Params& p, const Tensor& x) { return grad(partial_loss)(p, x); });
  ArrayDict g = step(partial_params(), f64({1, 1}, {1, 2}));
  EXPECT_TRUE(logs.contains("'w3' (arg0.w3)")) << logs.text();
  EXPECT_TRUE(logs.contains("never reach")) << logs.text();
  EXPECT_EQ(g.names(), (std::vector<std::string>{"w1", "b1", "w3"}));
  EXPECT_EQ(g["w3"].to_vector<double>(), (std::vector<double>{0, 0}));
  // d/dw1 sum((x w1) * b1) = x^T b1; d/db1 = x w1.
  EXPECT_EQ(g["w1"].to_vector<double>(), (std::vector<double>{1, -1, 1, -1}));
  EXPECT_EQ(g["b1"].to_vector<double>(), (std::vector<double>{4, 6}));
}

TEST(Autodiff, UnusedParameterWarningIsRecordedInTheTrace) {
  std::vector<std::string> warnings;
  auto step = jit([&](const Params& p, const Tensor& x) {
    auto g = grad(partial_loss)(p, x);
    warnings = TraceContext::current()->warnings;
    return g;
  });
  step(partial_params(), f64({1, 1}, {1, 2}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("'w3' (arg0.w3)"), std::string::npos) << warnings[0];
}

TEST(Autodiff, StrictModeMakesUnusedParametersAnError) {
  set_strict_unused_parameters(true);
  auto step = jit([](const Params& p, const Tensor& x) { return grad(partial_loss)(p, x); });
  expect_trace_error([&] { step(partial_params(), f64({1, 1}, {1, 2})); },
                     {"'w3' (arg0.w3)", "strict", "autodiff_test.cc"});
  set_strict_unused_parameters(false);
}

TEST(Autodiff, HasAuxPassesTheAuxValueThrough) {
  auto step = jit([](const Tensor& x) {
    auto [loss, g, aux] = value_and_grad_aux([](const Tensor& v) {
      Tensor sq = v * v;
      return std::tuple{sum(sq), sq};
    })(x);
    return std::tuple{loss, g, aux};
  });
  auto [loss, g, aux] = step(f64({1, 2, 3}, {3}));
  EXPECT_EQ(loss.item<double>(), 14);
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(aux.to_vector<double>(), (std::vector<double>{1, 4, 9}));
}

TEST(Autodiff, ArgnumsSelectsArguments) {
  auto f = [](const Tensor& a, const Tensor& b, const Tensor& c) { return sum(a * b * b * c); };
  auto step = jit([&](const Tensor& a, const Tensor& b, const Tensor& c) {
    auto [v, gs] = value_and_grad(f, argnums<0, 2>)(a, b, c);
    auto gb = grad(f, argnums<1>)(a, b, c);
    return std::tuple{v, std::get<0>(gs), std::get<1>(gs), gb};
  });
  auto [v, ga, gc, gb] = step(f64({2}, {1}), f64({3}, {1}), f64({5}, {1}));
  EXPECT_EQ(v.item<double>(), 90);
  EXPECT_EQ(ga.item<double>(), 45);  // b^2 c
  EXPECT_EQ(gc.item<double>(), 18);  // a b^2
  EXPECT_EQ(gb.item<double>(), 60);  // 2 a b c
}

// An embedding matrix E [V, D] used twice: rows gathered for the input, and E^T as the
// output projection (matmul with trans_b). Its gradient is the sum of both uses:
//   dE = scatter_add(ids, G_h)  +  G_logits^T h   (closed form, computed by hand below).
TEST(Autodiff, TiedWeightsReceiveTheSumOfBothGradients) {
  const int64_t V = 4, D = 3;
  Array E(DType::f64, {V, D});
  for (int64_t i = 0; i < E.size(); ++i) E.data<double>()[i] = 0.1 * double(i) - 0.5;
  const std::vector<int32_t> ids = {2, 0, 2};
  // loss = sum(W .* (h E^T)), h = E[ids] (3 x D), W fixed.
  std::vector<double> W = {1, -2, 0.5, 3, 2, 1, -1, 0.25, -0.5, 1.5, 2, -3};  // 3 x V
  auto step = jit([&](const Tensor& e) {
    return grad([&](const Tensor& emb) {
      Tensor h = take(emb, constant(Array::from_vector(ids)), 0);
      Tensor logits = matmul(h, emb, false, true);
      return sum(logits * constant(Array::from_vector(W, {3, V})));
    })(e);
  });
  Array g = step(E);
  // Closed form: d/dE from the projection is W^T h; from the gather, rows ids[j] += W[j] E.
  std::vector<double> expect(V * D, 0.0);
  const double* e = E.data<double>();
  for (int j = 0; j < 3; ++j)
    for (int v = 0; v < V; ++v)
      for (int d = 0; d < D; ++d) {
        expect[v * D + d] += W[j * V + v] * e[ids[j] * D + d];  // projection
        expect[ids[j] * D + d] += W[j * V + v] * e[v * D + d];  // gather
      }
  const std::vector<double> got = g.to_vector<double>();
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_NEAR(got[i], expect[i], 1e-12) << i;
}

// d/dlogits mean(softmax_cross_entropy) = (softmax - onehot) / N, stable at |logits| ~ 1e3.
TEST(Autodiff, SoftmaxCrossEntropyGradientIsSoftmaxMinusOneHot) {
  const std::vector<double> logits = {1000, -1000, 999, 0.5, -2, 3, -1000, -999.5, -1001};
  const std::vector<int32_t> labels = {2, 1, 0};
  auto step = jit([](const Tensor& z, const Tensor& y) {
    return value_and_grad([&](const Tensor& l) { return mean(softmax_cross_entropy(l, y)); })(z);
  });
  auto [loss, g] = step(f64(logits, {3, 3}), Array::from_vector(labels));
  double expect_loss = 0;
  for (int r = 0; r < 3; ++r) {
    double m = std::max({logits[3 * r], logits[3 * r + 1], logits[3 * r + 2]}), s = 0;
    for (int c = 0; c < 3; ++c) s += std::exp(logits[3 * r + c] - m);
    for (int c = 0; c < 3; ++c) {
      const double p = std::exp(logits[3 * r + c] - m) / s;
      EXPECT_NEAR(g.data<double>()[3 * r + c], (p - (c == labels[r])) / 3.0, 1e-14) << r << "," << c;
    }
    expect_loss += (m + std::log(s) - logits[3 * r + labels[r]]) / 3.0;
  }
  EXPECT_NEAR(loss.item<double>(), expect_loss, 1e-12);
}

TEST(Autodiff, GradientOfAnIntegerPathIsZeroAndReported) {
  testing::LogCapture logs;
  // x reaches the loss only through a cast to i32: no gradient flows.
  auto step = jit([](const Tensor& x) {
    return grad([](const Tensor& v) { return sum(cast(cast(v, DType::i32), DType::f64)); })(x);
  });
  Array g = step(f64({1.5, 2.5}, {2}));
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{0, 0}));
  EXPECT_TRUE(logs.contains("never reach")) << logs.text();
}

TEST(Autodiff, VjpWithASeed) {
  auto step = jit([](const Tensor& x, const Tensor& seed) {
    Tensor y = exp(x);
    return vjp(y, {x}, seed)[0];
  });
  Array g = step(f64({0, 1}, {2}), f64({2, 3}, {2}));
  EXPECT_NEAR(g.data<double>()[0], 2.0, 1e-15);
  EXPECT_NEAR(g.data<double>()[1], 3.0 * std::exp(1.0), 1e-14);
}

// Gradient graphs are ordinary graphs, so they can be differentiated again.
TEST(Autodiff, SecondDerivative) {
  auto step = jit([](const Tensor& x) {
    auto first = [](const Tensor& v) { return sum(grad([](const Tensor& u) { return sum(u * u * u); })(v)); };
    return grad(first)(x);  // d/dx sum(3 x^2) = 6 x
  });
  Array g = step(f64({1, -2, 0.5}, {3}));
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{6, -12, 3}));
}

// The gradient of a dense layer needs no transpose: matmul's flags carry it.
TEST(Autodiff, DenseLayerGradientHasNoTranspose) {
  auto step = jit([](const Params& p, const Tensor& x) {
    return grad([&](const Params& q) { return mean(relu(matmul(x, q["w"]) + q["b"])); })(p);
  });
  ArrayDict p = {{"w", he_normal({4, 3}, 1, DType::f64)}, {"b", zeros({3}, DType::f64)}};
  step(p, he_normal({5, 4}, 2, DType::f64));
  auto entry = step.core().last_entry();
  int matmuls = 0;
  for (const Node& n : entry->exe->graph->nodes()) {
    EXPECT_NE(n.op, Op::Transpose);
    matmuls += n.op == Op::MatMul;
  }
  // Forward x w and dW = x^T G; dx is not needed.
  EXPECT_EQ(matmuls, 2);
}

}  // namespace
}  // namespace fjit
