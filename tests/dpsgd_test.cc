// DP-SGD (examples/lib/dp_sgd.h) against independent oracles:
//  - the clipped-and-summed per-example gradient of a tiny MLP (both the f32 sum and the exact
//    fixed-point one) against a host loop in double that back-propagates each example alone,
//    takes its norm, clips and sums;
//  - with no noise and a clip no example reaches, a step is the ordinary step (AdamW on the
//    mean gradient of value_and_grad), to rounding;
//  - the noise has standard deviation sigma C / batch (a sample of 40000 draws, a 3% bound);
//  - bits: 1, 2 and 3 thread replicas on the same global batch (48 rows: 48, 24 or 16 per
//    replica, MLP 784-64-10) give the same parameters. That needs each example's own gradient
//    to have the same bits whatever rows share its products; at the job's shapes (784-512-256,
//    128 rows against 64) the products do not give a row the same bits, with BLIS or with
//    fjit's GEMM, so there only threads and MPI ranks of one count agree (lib/dp_sgd.h).
// The MPI side (ranks against thread replicas) is tests/mpi/dpsgd_mpi_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tests/dpsgd_testing.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using examples::clip_factors;
using examples::clipped_sum;
using examples::clipped_sum_fixed;
using examples::fixed_point_bits;
using examples::mlp_example_loss;
using examples::per_example_gradients;
using examples::per_example_norms;

constexpr int64_t kIn = 5, kHidden = 4, kOut = 3, kB = 6;

double at(const Array& a, int64_t i) { return a.data<float>()[i]; }

// The clipped sum in double, each example back-propagated alone through
// logits = relu(x w1 + b1) w2 + b2 and softmax cross entropy. Also returns the norms.
ArrayDict host_clipped_sum(const ArrayDict& p, const Array& x, const Array& y, double clip,
                           std::vector<double>* norms) {
  const Array &w1 = p["w1"], &b1 = p["b1"], &w2 = p["w2"], &b2 = p["b2"];
  std::vector<double> sw1(kIn * kHidden), sb1(kHidden), sw2(kHidden * kOut), sb2(kOut);
  for (int64_t b = 0; b < kB; ++b) {
    std::vector<double> pre(kHidden), h(kHidden), logit(kOut), d(kOut), dh(kHidden);
    for (int64_t j = 0; j < kHidden; ++j) {
      pre[j] = at(b1, j);
      for (int64_t i = 0; i < kIn; ++i) pre[j] += at(x, b * kIn + i) * at(w1, i * kHidden + j);
      h[j] = std::max(pre[j], 0.0);
    }
    double top = -1e300, z = 0;
    for (int64_t c = 0; c < kOut; ++c) {
      logit[c] = at(b2, c);
      for (int64_t j = 0; j < kHidden; ++j) logit[c] += h[j] * at(w2, j * kOut + c);
      top = std::max(top, logit[c]);
    }
    for (int64_t c = 0; c < kOut; ++c) z += std::exp(logit[c] - top);
    for (int64_t c = 0; c < kOut; ++c)
      d[c] = std::exp(logit[c] - top) / z - (c == y.data<int32_t>()[b] ? 1.0 : 0.0);
    for (int64_t j = 0; j < kHidden; ++j) {
      dh[j] = 0;
      for (int64_t c = 0; c < kOut; ++c) dh[j] += d[c] * at(w2, j * kOut + c);
      if (pre[j] <= 0) dh[j] = 0;
    }
    double sq = 0;
    for (int64_t i = 0; i < kIn; ++i)
      for (int64_t j = 0; j < kHidden; ++j) sq += std::pow(at(x, b * kIn + i) * dh[j], 2);
    for (int64_t j = 0; j < kHidden; ++j) sq += dh[j] * dh[j];
    for (int64_t j = 0; j < kHidden; ++j)
      for (int64_t c = 0; c < kOut; ++c) sq += std::pow(h[j] * d[c], 2);
    for (int64_t c = 0; c < kOut; ++c) sq += d[c] * d[c];
    const double norm = std::sqrt(sq), f = std::min(1.0, clip / norm);
    norms->push_back(norm);
    for (int64_t i = 0; i < kIn; ++i)
      for (int64_t j = 0; j < kHidden; ++j) sw1[i * kHidden + j] += f * at(x, b * kIn + i) * dh[j];
    for (int64_t j = 0; j < kHidden; ++j) sb1[j] += f * dh[j];
    for (int64_t j = 0; j < kHidden; ++j)
      for (int64_t c = 0; c < kOut; ++c) sw2[j * kOut + c] += f * h[j] * d[c];
    for (int64_t c = 0; c < kOut; ++c) sb2[c] += f * d[c];
  }
  ArrayDict out;
  out.set("w1", Array::from_vector(sw1, {kIn, kHidden}));
  out.set("b1", Array::from_vector(sb1, {kHidden}));
  out.set("w2", Array::from_vector(sw2, {kHidden, kOut}));
  out.set("b2", Array::from_vector(sb2, {kOut}));
  return out;
}

void expect_near(const ArrayDict& got, const ArrayDict& want, double tol, const char* what) {
  for (const auto& [name, w] : want) {
    const Array& g = got[name];
    ASSERT_EQ(g.size(), w.size()) << what << " " << name;
    for (int64_t i = 0; i < w.size(); ++i) {
      const double gv = g.dtype() == DType::f32 ? g.data<float>()[i] : g.data<double>()[i];
      EXPECT_NEAR(gv, w.data<double>()[i], tol * (1 + std::abs(w.data<double>()[i])))
          << what << " " << name << "[" << i << "]";
    }
  }
}

TEST(DpSgd, ClippedSumMatchesHostLoopInDouble) {
  const ArrayDict p = examples::init_mlp({kIn, kHidden, kOut}, 11);
  const Array x = he_normal({kB, kIn}, 12);
  const Array y = Array::from_vector<int32_t>({0, 1, 2, 2, 1, 0}, {kB});
  // The clip between the oracle's third and fourth smallest norms: it binds for half the
  // examples and not for the other half.
  std::vector<double> norms;
  host_clipped_sum(p, x, y, 1e30, &norms);
  std::vector<double> sorted = norms;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_LT(sorted[2] * 1.01, sorted[3]);
  const double clip = (sorted[2] + sorted[3]) / 2;
  norms.clear();
  const ArrayDict want = host_clipped_sum(p, x, y, clip, &norms);
  const int k = fixed_point_bits(clip);
  auto f = jit([clip, k](const Params& q, const Tensor& xs, const Tensor& ys) {
    const TensorDict g = per_example_gradients(mlp_example_loss, q, xs, ys);
    const Tensor n = per_example_norms(g);
    const Tensor factors = clip_factors(n, clip);
    const examples::FixedSum s = clipped_sum_fixed(g, factors, k);
    TensorDict exact;
    for (const auto& [name, hi] : s.hi)
      exact.set(name, (hi + s.lo.at(name) * std::ldexp(1.0, -31)) * std::ldexp(1.0, -k));
    return std::tuple{clipped_sum(g, factors), exact, n};
  });
  auto [plain, exact, n] = f(p, x, y);
  for (int64_t b = 0; b < kB; ++b) EXPECT_NEAR(n.data<float>()[b], norms[b], 1e-5 * (1 + norms[b]));
  expect_near(plain, want, 1e-5, "f32 clipped sum");
  expect_near(exact, want, 1e-5, "fixed-point clipped sum");
  // The fixed-point sum is the f32 sum to f32 rounding: the grid is far finer.
  for (size_t i = 0; i < plain.size(); ++i)
    for (int64_t j = 0; j < plain.value(i).size(); ++j)
      EXPECT_NEAR(exact.value(i).data<double>()[j], plain.value(i).data<float>()[j], 1e-6);
}

TEST(DpSgd, BadClipOrNoiseIsRefused) {
  EXPECT_THROW(fixed_point_bits(0.0), std::invalid_argument);
  EXPECT_THROW(fixed_point_bits(std::nan("")), std::invalid_argument);
  examples::DpSgdStepFn fn;
  fn.noise = -1;
  EXPECT_THROW(examples::make_dp_sgd_step(Mesh::threads(1), fn), std::invalid_argument);
}

TEST(DpSgd, NoNoiseAndAnUnreachedClipIsTheOrdinaryStep) {
  const io::Dataset data = testing::synthetic_images(32, 7);
  const std::vector<int64_t> layers = {784, 32, 10};
  testing::DpRun run{.layers = layers, .batch = 32, .steps = 2, .clip = 1e4, .noise = 0};
  const ArrayDict dp = testing::train_dp(Mesh::threads(1), data, run);
  AdamW opt;
  ArrayDict params = examples::init_mlp(layers, 5), state = opt.init_state(params);
  auto step = jit([opt](const Params& p, const Params& s, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad([](const Params& q, const Tensor& xs, const Tensor& ys) {
      return mean(softmax_cross_entropy(examples::mlp_logits(q, xs), ys));
    })(p, x, y);
    AdamW o = opt;
    o.lr = 1e-2;
    auto [p2, s2] = o.update(p, g, s);
    return std::tuple{p2, s2};
  });
  io::BatchIterator batches(data, {.batch_size = 32, .seed = 1});
  for (int s = 0; s < run.steps; ++s) {
    if (s > 0) batches.set_epoch(s);
    const io::Batch* b = batches.next();
    auto [p2, s2] = step(params, state, (*b)["images"], (*b)["labels"]);
    params = p2;
    state = s2;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Array &a = params.value(i), &d = dp[params.name(i)];
    double worst = 0;
    for (int64_t j = 0; j < a.size(); ++j) worst = std::max(worst, std::abs(double(a.data<float>()[j]) - d.data<float>()[j]));
    // AdamW moves each element by about lr = 1e-2 per step; rounding moves it far less.
    EXPECT_LT(worst, 1e-5) << params.name(i);
  }
}

TEST(DpSgd, NoiseHasStandardDeviationSigmaClipOverBatch) {
  const double clip = 0.7, sigma = 1.3, count = 4;
  const int k = fixed_point_bits(clip);
  auto f = jit([=](const Tensor& hi, const Tensor& lo, const Tensor& step) {
    examples::FixedSum s;
    s.hi.set("a", hi);
    s.lo.set("a", lo);
    s.hi.set("b", hi);
    s.lo.set("b", lo);
    const Tensor key = fold_in(PRNGKey(9), step);
    const Tensor n = scalar(DType::f32, count);
    TensorDict with = examples::noised_mean(s, k, key, clip, sigma, n);
    TensorDict without = examples::noised_mean(s, k, key, clip, 0.0, n);
    return std::tuple{with["a"] - without["a"], with["b"] - without["b"]};
  });
  const int64_t n = 20000;
  Array hi(DType::f64, {n}), lo(DType::f64, {n});
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> any(-1 << 20, 1 << 20);
  for (int64_t i = 0; i < n; ++i) {
    hi.data<double>()[i] = any(rng);
    lo.data<double>()[i] = any(rng);
  }
  auto [a, b] = f(hi, lo, Array::scalar(int32_t{2}));
  double s1 = 0, s2 = 0, cross = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double u = a.data<float>()[i], v = b.data<float>()[i];
    s1 += u + v;
    s2 += u * u + v * v;
    cross += u * v;
  }
  const double mean = s1 / (2 * n), sd = std::sqrt(s2 / (2 * n) - mean * mean);
  const double want = sigma * clip / count;
  EXPECT_NEAR(sd, want, 0.03 * want);
  EXPECT_NEAR(mean, 0.0, 5 * want / std::sqrt(2.0 * n));
  // The two leaves draw independent noise.
  EXPECT_NEAR(cross / n / (want * want), 0.0, 0.05);
}

TEST(DpSgd, OneTwoAndThreeThreadReplicasGiveTheSameBits) {
  const io::Dataset data = testing::synthetic_images(96, 8);
  const testing::DpRun run;
  const ArrayDict one = testing::train_dp(Mesh::threads(1), data, run);
  testing::expect_bit_equal(one, testing::train_dp(Mesh::threads(2), data, run), "2 replicas");
  testing::expect_bit_equal(one, testing::train_dp(Mesh::threads(3), data, run), "3 replicas");
  // The steps moved the parameters.
  const ArrayDict start = examples::init_mlp(run.layers, 5);
  EXPECT_FALSE(one["w1"].bit_equal(start["w1"]));
}

}  // namespace
}  // namespace fjit
