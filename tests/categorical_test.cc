// categorical (core/trace/random.h): empirical frequencies against softmax(logits) at a fixed
// key, reproducibility, masked classes never drawn, and the axis argument.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/ir/convert.h"
#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

constexpr int64_t kDraws = 20000;

std::vector<double> softmax_of(const std::vector<double>& l) {
  double m = -std::numeric_limits<double>::infinity(), z = 0;
  for (double v : l) m = std::max(m, v);
  std::vector<double> p;
  for (double v : l) p.push_back(std::exp(v - m)), z += p.back();
  for (double& v : p) v /= z;
  return p;
}

// kDraws rows of the same logits: one sample per row.
Array tiled(const std::vector<double>& l, DType t) {
  Array a(t, {kDraws, static_cast<int64_t>(l.size())});
  for (int64_t i = 0; i < a.size(); ++i) set_element_from_double(t, a.raw(), i, l[i % l.size()]);
  return a;
}

std::vector<int64_t> counts_of(const Array& samples, size_t classes) {
  std::vector<int64_t> c(classes, 0);
  for (int32_t s : samples.to_vector<int32_t>()) {
    EXPECT_GE(s, 0);
    EXPECT_LT(s, static_cast<int32_t>(classes));
    if (s >= 0 && s < static_cast<int32_t>(classes)) ++c[s];
  }
  return c;
}

// Each count is Binomial(kDraws, p): within 5 standard deviations (a correct sampler fails
// this with probability below 1e-6 per class; the key is fixed, so the test is deterministic).
void expect_frequencies(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  for (size_t k = 0; k < p.size(); ++k) {
    const double mean = kDraws * p[k], sigma = std::sqrt(kDraws * p[k] * (1 - p[k]));
    EXPECT_LE(std::abs(counts[k] - mean), 5 * sigma + 1e-9)
        << "class " << k << ": " << counts[k] << " draws, expected " << mean << " +- " << sigma;
  }
}

TEST(Categorical, FrequenciesMatchSoftmaxAndTheSameKeyGivesTheSameSamples) {
  const std::vector<double> logits = {0.5, -1.0, 2.0, 0.0, 1.2};
  auto sample = jit([](const Tensor& key, const Tensor& l) { return categorical(key, l); });
  for (DType t : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(t));
    const Array a = sample(prng_key_array(42), tiled(logits, t));
    EXPECT_EQ(a.shape(), (Shape{kDraws}));
    expect_frequencies(counts_of(a, logits.size()), softmax_of(logits));
    EXPECT_TRUE(a.bit_equal(sample(prng_key_array(42), tiled(logits, t))));
    EXPECT_FALSE(a.bit_equal(sample(prng_key_array(43), tiled(logits, t))));
  }
}

TEST(Categorical, MaskedClassesAreNeverDrawn) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> logits = {1.0, -inf, 0.0, -1e30, -inf, 0.5};
  auto sample = jit([](const Tensor& key, const Tensor& l) { return categorical(key, l); });
  for (DType t : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<int64_t> c = counts_of(sample(prng_key_array(7), tiled(logits, t)), logits.size());
    EXPECT_EQ(c[1], 0);
    EXPECT_EQ(c[3], 0);
    EXPECT_EQ(c[4], 0);
    expect_frequencies(c, softmax_of(logits));
  }
}

// Along axis 0 of [classes, draws]: the same law, the result [draws].
TEST(Categorical, AlongTheFirstAxis) {
  const std::vector<double> logits = {0.0, 1.0, -0.5};
  Array l(DType::f64, {3, kDraws});
  for (int64_t i = 0; i < l.size(); ++i) l.data<double>()[i] = logits[i / kDraws];
  auto sample = jit([](const Tensor& key, const Tensor& l) { return categorical(key, l, 0); });
  const Array a = sample(prng_key_array(3), l);
  EXPECT_EQ(a.shape(), (Shape{kDraws}));
  expect_frequencies(counts_of(a, 3), softmax_of(logits));
}

TEST(Categorical, BadLogitsNameCategoricalAndTheCallSite) {
  int line = 0;
  auto f = jit([&](const Tensor& key, const Tensor& l) {
    line = __LINE__ + 1;
    return categorical(key, l, 2);
  });
  const std::string e = testing::error_of<TraceError>([&] { f(prng_key_array(1), Array::from_vector<double>({1, 2}, {2})); });
  EXPECT_NE(e.find("categorical"), std::string::npos) << e;
  EXPECT_NE(e.find("axis 2 is out of range"), std::string::npos) << e;
  EXPECT_NE(e.find("categorical_test.cc:" + std::to_string(line)), std::string::npos) << e;
}

}  // namespace
}  // namespace fjit
