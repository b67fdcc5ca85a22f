// Random numbers in traced code: the Philox block against Random123's known answers, the
// traced ops against the block, reproducibility (same key, same bits: across calls, intra-op
// thread counts and replicas), independence of split and fold_in streams, and the
// distributions against their laws (moments, Kolmogorov-Smirnov, chi-square) at fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/kernels/random/philox.h"
#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using Words = std::array<uint32_t, 4>;

TEST(Random, PhiloxMatchesRandom123KnownAnswers) {
  // Random123 v1.14 tests/kat_vectors, "philox4x32 10" lines: counter, key, output.
  struct Kat { Words ctr; std::array<uint32_t, 2> key; Words out; };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) EXPECT_EQ(kernels::philox4x32_10(k.ctr, k.key), k.out);
}

TEST(Random, TracedBitsAreThePhiloxStream) {
  // Element i is word i % 4 of block (i / 4, 0, 0, 0) under the key: block 0 of key 0 is the
  // first known answer; the reference kernel (constant folding) and the fast one agree.
  auto bits = jit([](const Tensor& key) { return random_bits(key, {4, 3}); });
  const std::vector<uint32_t> got = bits(prng_key_array(0)).to_vector<uint32_t>();
  const Words b0 = kernels::philox4x32_10({0, 0, 0, 0}, {0, 0});
  const Words b1 = kernels::philox4x32_10({1, 0, 0, 0}, {0, 0});
  const Words b2 = kernels::philox4x32_10({2, 0, 0, 0}, {0, 0});
  std::vector<uint32_t> want(b0.begin(), b0.end());
  want.insert(want.end(), b1.begin(), b1.end());
  want.insert(want.end(), b2.begin(), b2.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(got[0], 0x6627e8d5u);
  auto folded = jit([] { return random_bits(PRNGKey(0), {4, 3}); });  // a constant key: folded
  EXPECT_EQ(folded().to_vector<uint32_t>(), want);
}

TEST(Random, SameKeySameBitsAtAnyThreadCountAndReplica) {
  auto draw = [](const Tensor& key) { return normal(fold_in(key, 7u), {257, 33}); };
  auto f = jit(draw);
  const Array key = prng_key_array(42);
  const int saved = intra_op_threads();
  set_intra_op_threads(1);
  const Array one = f(key);
  set_intra_op_threads(2);
  const Array two = f(key);
  set_intra_op_threads(saved);
  EXPECT_TRUE(one.bit_equal(two));
  EXPECT_TRUE(one.bit_equal(f(key)));
  // Two thread replicas without fold_in(axis_index) draw the same stream; with it, not.
  Mesh mesh = Mesh::threads(2);
  auto same = pmap(mesh, "r", [draw](const Tensor& key) { return all_gather(draw(key), "r"); },
                   {}, {{0}});
  const Array both = same(key);
  EXPECT_TRUE(both.rows(0, 257).bit_equal(one));
  EXPECT_TRUE(both.rows(257, 514).bit_equal(one));
  auto per_replica = pmap(mesh, "r", [](const Tensor& key) {
    return all_gather(uniform(fold_in(key, axis_index("r")), {1, 64}), "r");
  }, {}, {{0}});
  const Array r = per_replica(key);
  EXPECT_FALSE(r.rows(0, 1).bit_equal(r.rows(1, 2)));
}

TEST(Random, SplitAndFoldInGiveDistinctIndependentKeys) {
  auto f = jit([](const Tensor& key) {
    Tensor ks = split(key, 4);  // [4, 2]
    std::vector<Tensor> out;
    for (int i = 0; i < 4; ++i) out.push_back(reshape(slice(ks, {i, 0}, {i + 1, 2}), {2}));
    out.push_back(fold_in(key, 0u));
    out.push_back(fold_in(key, 1u));
    out.push_back(slice(random_bits(key, {4}), {0}, {2}));  // the key's own bits
    return concat(out, 0);
  });
  const std::vector<uint32_t> k = f(prng_key_array(3)).to_vector<uint32_t>();
  std::set<std::pair<uint32_t, uint32_t>> keys;
  for (size_t i = 0; i < k.size(); i += 2) keys.insert({k[i], k[i + 1]});
  EXPECT_EQ(keys.size(), k.size() / 2) << "split, fold_in and random_bits must not collide";
  // Streams of different keys are uncorrelated (|r| within 4 sigma of 0 for n = 20000).
  auto pair = jit([](const Tensor& key) {
    Tensor ks = split(key, 2);
    Tensor a = uniform(reshape(slice(ks, {0, 0}, {1, 2}), {2}), {20000}, DType::f64);
    Tensor b = uniform(reshape(slice(ks, {1, 0}, {2, 2}), {2}), {20000}, DType::f64);
    return concat({a, b}, 0);
  });
  const std::vector<double> v = pair(prng_key_array(9)).to_vector<double>();
  double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
  for (int i = 0; i < 20000; ++i) {
    const double a = v[i] - 0.5, b = v[20000 + i] - 0.5;
    sab += a * b, saa += a * a, sbb += b * b, sa += a, sb += b;
  }
  EXPECT_LT(std::abs(sab / std::sqrt(saa * sbb)), 4.0 / std::sqrt(20000.0));
}

// Kolmogorov-Smirnov distance of a sample to a continuous CDF.
template <class Cdf> double ks_distance(std::vector<double> x, Cdf cdf) {
  std::sort(x.begin(), x.end());
  const double n = static_cast<double>(x.size());
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double f = cdf(x[i]);
    d = std::max({d, (i + 1) / n - f, f - i / n});
  }
  return d;
}

constexpr int kN = 100000;
// KS critical value at alpha = 0.001: 1.95 / sqrt(n).
const double kKsCritical = 1.95 / std::sqrt(static_cast<double>(kN));

TEST(Random, UniformMomentsAndKolmogorovSmirnov) {
  for (DType t : {DType::f32, DType::f64}) {
    auto f = jit([t](const Tensor& key) { return cast(uniform(key, {kN}, t, -1.0, 3.0), DType::f64); });
    const std::vector<double> x = f(prng_key_array(11)).to_vector<double>();
    double mean = 0, var = 0;
    for (double v : x) {
      ASSERT_TRUE(v >= -1.0 && v < 3.0) << v;
      mean += v / kN;
    }
    for (double v : x) var += (v - mean) * (v - mean) / kN;
    EXPECT_NEAR(mean, 1.0, 4 * std::sqrt(16.0 / 12 / kN));  // 4 sigma
    EXPECT_NEAR(var, 16.0 / 12, 0.02);
    EXPECT_LT(ks_distance(x, [](double v) { return (v + 1) / 4; }), kKsCritical) << dtype_name(t);
  }
}

TEST(Random, NormalMomentsAndKolmogorovSmirnov) {
  for (DType t : {DType::f32, DType::f64}) {
    auto f = jit([t](const Tensor& key) { return cast(normal(key, {kN}, t), DType::f64); });
    const std::vector<double> x = f(prng_key_array(12)).to_vector<double>();
    double m1 = 0, m2 = 0, m4 = 0;
    for (double v : x) m1 += v / kN, m2 += v * v / kN, m4 += v * v * v * v / kN;
    EXPECT_NEAR(m1, 0.0, 4 / std::sqrt(double(kN)));
    EXPECT_NEAR(m2, 1.0, 4 * std::sqrt(2.0 / kN));
    EXPECT_NEAR(m4, 3.0, 4 * std::sqrt(96.0 / kN));  // kurtosis of a normal
    EXPECT_LT(ks_distance(x, [](double v) { return 0.5 * std::erfc(-v / std::sqrt(2.0)); }),
              kKsCritical) << dtype_name(t);
  }
}

TEST(Random, RandintChiSquareAndBernoulliRate) {
  auto f = jit([](const Tensor& key) { return randint(key, {kN}, -3, 7); });
  const std::vector<int32_t> x = f(prng_key_array(13)).to_vector<int32_t>();
  std::vector<double> counts(10, 0);
  for (int32_t v : x) {
    ASSERT_TRUE(v >= -3 && v < 7) << v;
    counts[v + 3] += 1;
  }
  double chi2 = 0;
  for (double c : counts) chi2 += (c - kN / 10.0) * (c - kN / 10.0) / (kN / 10.0);
  EXPECT_LT(chi2, 27.88);  // chi-square, 9 degrees of freedom, alpha = 0.001
  auto b = jit([](const Tensor& key) { return bernoulli(key, 0.3, {kN}); });
  const std::vector<bool> hits = b(prng_key_array(14)).to_vector<bool>();
  const double rate = std::count(hits.begin(), hits.end(), true) / double(kN);
  EXPECT_NEAR(rate, 0.3, 4 * std::sqrt(0.3 * 0.7 / kN));
}

TEST(Random, DropoutKeepsAndScales) {
  auto f = jit([](const Tensor& x, const Tensor& key) { return dropout(x, 0.25, key); });
  const Array x = Array::full(DType::f32, {200, 500}, 2.0);
  const std::vector<float> y = f(x, prng_key_array(15)).to_vector<float>();
  int64_t zeros = 0;
  for (float v : y) {
    if (v == 0) ++zeros;
    else ASSERT_EQ(v, 2.0f / 0.75f);
  }
  EXPECT_NEAR(zeros / double(y.size()), 0.25, 4 * std::sqrt(0.25 * 0.75 / y.size()));
  auto none = jit([](const Tensor& x, const Tensor& key) { return dropout(x, 0.0, key); });
  EXPECT_TRUE(none(x, prng_key_array(1)).bit_equal(x));
}

TEST(Random, BadKeysAreTraceErrorsNamingTheOpAndCallSite) {
  auto f = jit([](const Tensor& x) { return uniform(x, {3}); });
  const std::string msg = testing::error_of<TraceError>([&] { f(Array::zeros(DType::f32, {2})); });
  EXPECT_NE(msg.find("uniform"), std::string::npos) << msg;
  EXPECT_NE(msg.find("u32[2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("random_test.cc"), std::string::npos) << msg;
  auto g = jit([](const Tensor& x, const Tensor& key) { return dropout(x, 1.0, key); });
  const std::string rate = testing::error_of<TraceError>(
      [&] { g(Array::zeros(DType::f32, {2}), prng_key_array(0)); });
  EXPECT_NE(rate.find("dropout"), std::string::npos) << rate;
}

}  // namespace
}  // namespace fjit
