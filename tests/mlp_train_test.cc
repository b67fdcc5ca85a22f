// End to end: an MLP with two hidden layers learns a small deterministic 3-class problem
// (three concentric rings in 2-D, not linearly separable) with each optimizer, in one jitted
// step: value_and_grad + update. The loss (about 1.3 at the start) must fall below 0.05 in 300
// full-batch steps (it reaches 0.004-0.007 with every optimizer), and two runs from
// the same seed must be bit-identical.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/fjit.h"
#include "core/lib/initializers.h"
#include "parallel/pmap.h"

namespace fjit {
namespace {

constexpr int64_t kExamples = 240, kClasses = 3;

struct Dataset {
  Array x, y;
};

// Points with radius in ring k's band [k, k + 0.8) (plus a little noise), angle uniform.
Dataset rings(uint64_t seed) {
  Dataset d{Array(DType::f32, {kExamples, 2}), Array(DType::i32, {kExamples})};
  SplitMix64 rng(seed);
  for (int64_t i = 0; i < kExamples; ++i) {
    const int32_t k = static_cast<int32_t>(i % kClasses);
    const double r = 0.5 + k + 0.8 * rng.uniform(), a = 6.283185307179586 * rng.uniform();
    d.x.data<float>()[2 * i] = static_cast<float>(r * std::cos(a) + 0.05 * rng.normal());
    d.x.data<float>()[2 * i + 1] = static_cast<float>(r * std::sin(a) + 0.05 * rng.normal());
    d.y.data<int32_t>()[i] = k;
  }
  return d;
}

Tensor mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  Tensor h1 = relu(matmul(x, p["w1"]) + p["b1"]);
  Tensor h2 = relu(matmul(h1, p["w2"]) + p["b2"]);
  return mean(softmax_cross_entropy(matmul(h2, p["w3"]) + p["b3"], y));
}

struct Run {
  std::vector<float> losses;
  ArrayDict params;
};

template <class Opt>
Run train(const Opt& opt, int steps) {
  const Dataset d = rings(42);
  Run run;
  run.params = mlp_params({2, 32, 32, kClasses}, 7, Init::he_normal);
  ArrayDict state = opt.init_state(run.params);
  auto step = jit([opt](const Params& p, const Params& s, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    auto [p2, s2] = opt.update(p, g, s);
    return std::tuple{p2, s2, loss};
  });
  for (int i = 0; i < steps; ++i) {
    auto [p2, s2, loss] = step(run.params, state, d.x, d.y);
    run.params = p2;
    state = s2;
    run.losses.push_back(loss.template item<float>());
  }
  EXPECT_EQ(step.core().compile_count(), 1);
  return run;
}

template <class Opt>
void expect_learns(const Opt& opt, int steps, float below) {
  Run a = train(opt, steps);
  ASSERT_FALSE(a.losses.empty());
  EXPECT_GT(a.losses.front(), 0.9f);  // about log(3) at the start
  EXPECT_LT(a.losses.back(), below) << "first loss " << a.losses.front();
  // Deterministic: a second run is bit-identical, step by step and in the final parameters.
  Run b = train(opt, steps);
  EXPECT_EQ(a.losses, b.losses);
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_TRUE(a.params.value(i).bit_equal(b.params.value(i))) << a.params.name(i);
}

TEST(MlpTrain, SgdMomentum) { expect_learns(SGD{.lr = 0.1, .momentum = 0.9}, 300, 0.05f); }
TEST(MlpTrain, SgdNesterovWeightDecay) {
  expect_learns(SGD{.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-4}, 300, 0.05f);
}
TEST(MlpTrain, Adam) { expect_learns(Adam{.lr = 0.01}, 300, 0.05f); }
TEST(MlpTrain, AdamW) { expect_learns(AdamW{.lr = 0.01, .weight_decay = 1e-2}, 300, 0.05f); }

// Clipping composes into the same step (and changes nothing when the norm stays small).
TEST(MlpTrain, SgdWithClipping) {
  const Dataset d = rings(42);
  ArrayDict p = mlp_params({2, 32, 32, kClasses}, 7);
  auto step = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    return std::tuple{sgd(p, clip_by_global_norm(g, 1.0), 0.2), loss};
  });
  float first = 0, last = 0;
  for (int i = 0; i < 300; ++i) {
    auto [p2, loss] = step(p, d.x, d.y);
    p = p2;
    (i == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, 0.3f) << "first " << first;
}

// The same step data-parallel over two thread replicas (gradients averaged with pmean) gives
// the single-replica result up to float rounding: the gradient graph composes with pmap.
TEST(MlpTrain, DataParallelStepMatchesSingleReplica) {
  const Dataset d = rings(42);
  const ArrayDict p = mlp_params({2, 32, 32, kClasses}, 7);
  auto single = jit([](const Params& q, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(q, x, y);
    return std::tuple{sgd(q, g, 0.1), loss};
  });
  auto parallel = pmap(Mesh::threads(2), "batch", [](const Params& q, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(q, x, y);
    return std::tuple{sgd(q, pmean(g, "batch"), 0.1), pmean(loss, "batch")};
  });
  auto [p1, l1] = single(p, d.x, d.y);
  auto [p2, l2] = parallel(p, d.x, d.y);
  EXPECT_NEAR(l1.item<float>(), l2.item<float>(), 1e-5);
  for (size_t i = 0; i < p1.size(); ++i)
    for (int64_t e = 0; e < p1.value(i).size(); ++e)
      ASSERT_NEAR(p1.value(i).data<float>()[e], p2.value(i).data<float>()[e], 1e-5) << p1.name(i) << "[" << e << "]";
}

// Initializers are bit-reproducible: these values are the same on every machine and build.
TEST(Init, GoldenValuesAndMoments) {
  SplitMix64 r(0);
  EXPECT_EQ(r.next(), 0xe220a8397b1dcdafULL);  // splitmix64's published first output for seed 0
  Array a = he_normal({1000, 50}, 123);
  const std::vector<float> head = {0x1.2a00dcp-5f, 0x1.358c86p-6f, 0x1.c5c5e8p-5f, 0x1.97744ep-5f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.data<float>()[i], head[i]) << i;
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    s += a.data<float>()[i];
    s2 += double(a.data<float>()[i]) * a.data<float>()[i];
  }
  EXPECT_NEAR(s / a.size(), 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(s2 / a.size()), std::sqrt(2.0 / 1000), 5e-4);  // he: std sqrt(2/fan_in)
  Array u = glorot_uniform({30, 20}, 5);
  EXPECT_EQ(u.data<float>()[0], -0x1.415428p-4f);
  for (int64_t i = 0; i < u.size(); ++i) EXPECT_LE(std::abs(u.data<float>()[i]), std::sqrt(6.0 / 50));
  EXPECT_TRUE(mlp_params({3, 4, 2}, 9)["w1"].bit_equal(mlp_params({3, 4, 2}, 9)["w1"]));
  EXPECT_FALSE(mlp_params({3, 4, 2}, 9)["w1"].bit_equal(mlp_params({3, 4, 2}, 10)["w1"]));
  for (double x : {1e-300, 0.3, 1.0, 2.5, 1e10}) EXPECT_NEAR(portable_log(x), std::log(x), 1e-15 * std::abs(std::log(x)) + 1e-300);
}

}  // namespace
}  // namespace fjit
