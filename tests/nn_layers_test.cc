// The parameterized layers of core/nn (linear, mlp, embedding, self_attention) against plain
// host loops in f64, their parameter names and initializers, and the gradient an embedding
// gets from gather's rule.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::random_f64;

// rows x [n, in] @ w [in, out] + b [out] on the host.
std::vector<double> host_affine(const double* x, int64_t n, const Array& w, const Array& b) {
  const int64_t in = w.shape()[0], out = w.shape()[1];
  std::vector<double> y(n * out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.data<double>()[o];
      for (int64_t k = 0; k < in; ++k) acc += x[r * in + k] * w.data<double>()[k * out + o];
      y[r * out + o] = acc;
    }
  return y;
}

TEST(NnLayers, LinearParamsAreNamedAndShapedAsDocumented) {
  ArrayDict d;
  linear_params(d, "fc", 3, 5, 7, Init::he_normal);
  ASSERT_EQ(d.names(), (std::vector<std::string>{"fc/w", "fc/b"}));
  EXPECT_EQ(d["fc/w"].shape(), (Shape{3, 5}));
  EXPECT_TRUE(d["fc/w"].bit_equal(he_normal({3, 5}, 7)));
  EXPECT_TRUE(d["fc/b"].bit_equal(zeros({5})));
  conv2d_params(d, "conv", {3, 3, 2, 4}, 9);
  layer_norm_params(d, "ln", 4);
  self_attention_params(d, "attn", 8, 11);
  embedding_params(d, "tok", 10, 4, 13);
  EXPECT_EQ(d.names(), (std::vector<std::string>{"fc/w", "fc/b", "conv/w", "conv/b", "ln/g",
                                                 "ln/b", "attn/qkv/w", "attn/qkv/b", "attn/out/w",
                                                 "attn/out/b", "tok/table"}));
  EXPECT_EQ(d["attn/qkv/w"].shape(), (Shape{8, 24}));
  EXPECT_TRUE(d["attn/out/w"].bit_equal(glorot_uniform({8, 8}, 12)));
  EXPECT_EQ(d["tok/table"].shape(), (Shape{10, 4}));
  EXPECT_EQ(d["ln/g"].at_as_double(3), 1.0);
}

TEST(NnLayers, LinearOfAnyRankIsOneAffineMapOfTheLastAxis) {
  ArrayDict d;
  linear_params(d, "fc", 4, 3, 1, Init::glorot_uniform, DType::f64);
  d.set("fc/b", random_f64({3}, 2));
  const Array x2 = random_f64({5, 4}, 3), x3 = random_f64({2, 5, 4}, 4);
  auto f = jit([](const Params& p, const Tensor& a, const Tensor& b) {
    return std::tuple{linear(p, "fc", a), linear(p, "fc", b)};
  });
  auto [y2, y3] = f(d, x2, x3);
  EXPECT_EQ(y3.shape(), (Shape{2, 5, 3}));
  const std::vector<double> want2 = host_affine(x2.data<double>(), 5, d["fc/w"], d["fc/b"]);
  const std::vector<double> want3 = host_affine(x3.data<double>(), 10, d["fc/w"], d["fc/b"]);
  for (size_t i = 0; i < want2.size(); ++i) EXPECT_NEAR(y2.data<double>()[i], want2[i], 1e-14);
  for (size_t i = 0; i < want3.size(); ++i) EXPECT_NEAR(y3.data<double>()[i], want3[i], 1e-14);
}

TEST(NnLayers, MlpIsLinearLayersWithTheActivationBetween) {
  const ArrayDict d = mlp_params({4, 6, 3}, 5, Init::he_normal, DType::f64);
  const Array x = random_f64({7, 4}, 6);
  auto f = jit([](const Params& p, const Tensor& x) {
    const MlpOptions with_tanh{.prefix = "", .activation = [](const Tensor& h) { return tanh(h); }};
    return std::tuple{mlp(p, x), mlp(p, x, with_tanh)};
  });
  auto [relu_out, tanh_out] = f(d, x);
  std::vector<double> h = host_affine(x.data<double>(), 7, d["w1"], d["b1"]);
  std::vector<double> hr = h, ht = h;
  for (double& v : hr) v = std::max(v, 0.0);
  for (double& v : ht) v = std::tanh(v);
  const std::vector<double> yr = host_affine(hr.data(), 7, d["w2"], d["b2"]);
  const std::vector<double> yt = host_affine(ht.data(), 7, d["w2"], d["b2"]);
  for (size_t i = 0; i < yr.size(); ++i) {
    EXPECT_NEAR(relu_out.data<double>()[i], yr[i], 1e-13);
    EXPECT_NEAR(tanh_out.data<double>()[i], yt[i], 1e-13);
  }
  auto none = jit([](const Params& p, const Tensor& x) { return mlp(p, x); });
  EXPECT_THROW(none(ArrayDict{}, x), TraceError);
}

TEST(NnLayers, EmbeddingPicksRowsAndItsGradientAddsCotangentRows) {
  ArrayDict d;
  embedding_params(d, "tok", 5, 3, 1, DType::f64);
  const Array ids = Array::from_vector<int32_t>({4, 0, 4, 2}, {2, 2});
  auto f = jit([](const Params& p, const Tensor& ids) { return embedding(p, "tok", ids); });
  const Array y = f(d, ids);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 3}));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_EQ(y.data<double>()[i * 3 + c], d["tok/table"].data<double>()[ids.data<int32_t>()[i] * 3 + c]);
  // d/d table of sum(embedding): each row counts how often its id occurs.
  auto g = jit(grad([](const Params& p, const Tensor& ids) { return sum(embedding(p, "tok", ids)); }));
  const ArrayDict gt = g(d, ids);
  const double counts[5] = {1, 0, 1, 0, 2};
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(gt["tok/table"].data<double>()[r * 3 + c], counts[r]);
  auto bad = jit([](const Params& p, const Tensor& x) { return embedding(p, "tok", x); });
  EXPECT_THROW(bad(d, random_f64({2}, 3)), TraceError);
}

// Multi-head self-attention on the host, f64, one batch element: h [T, D].
std::vector<double> host_attention(const double* h, int64_t t, int64_t d, int64_t heads,
                                   bool causal, const ArrayDict& p) {
  const std::vector<double> qkv = host_affine(h, t, p["attn/qkv/w"], p["attn/qkv/b"]);  // [T, 3D]
  const int64_t dh = d / heads;
  std::vector<double> mixed(t * d, 0.0);
  for (int64_t hd = 0; hd < heads; ++hd)
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> s(t);
      double m = -1e300;
      for (int64_t j = 0; j < t; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < dh; ++k)
          dot += qkv[i * 3 * d + hd * dh + k] * qkv[j * 3 * d + d + hd * dh + k];
        s[j] = (causal && j > i) ? -1e300 : dot / std::sqrt(double(dh));
        m = std::max(m, s[j]);
      }
      double z = 0;
      for (int64_t j = 0; j < t; ++j) z += s[j] = (causal && j > i) ? 0.0 : std::exp(s[j] - m);
      for (int64_t j = 0; j < t; ++j)
        for (int64_t k = 0; k < dh; ++k)
          mixed[i * d + hd * dh + k] += s[j] / z * qkv[j * 3 * d + 2 * d + hd * dh + k];
    }
  return host_affine(mixed.data(), t, p["attn/out/w"], p["attn/out/b"]);
}

TEST(NnLayers, SelfAttentionMatchesTheHostDefinitionPlainAndCausal) {
  const int64_t b = 2, t = 5, d = 8, heads = 2;
  ArrayDict p;
  self_attention_params(p, "attn", d, 3, Init::glorot_uniform, DType::f64);
  p.set("attn/qkv/b", random_f64({3 * d}, 4));
  const Array h = random_f64({b, t, d}, 5);
  auto f = jit([](const Params& p, const Tensor& h) {
    return std::tuple{self_attention(p, "attn", h, {.heads = 2}),
                      self_attention(p, "attn", h, {.heads = 2, .causal = true})};
  });
  auto [plain, causal] = f(p, h);
  ASSERT_EQ(plain.shape(), (Shape{b, t, d}));
  for (int64_t n = 0; n < b; ++n) {
    const double* hn = h.data<double>() + n * t * d;
    const std::vector<double> want = host_attention(hn, t, d, heads, false, p);
    const std::vector<double> want_causal = host_attention(hn, t, d, heads, true, p);
    for (int64_t i = 0; i < t * d; ++i) {
      EXPECT_NEAR(plain.data<double>()[n * t * d + i], want[i], 1e-12);
      EXPECT_NEAR(causal.data<double>()[n * t * d + i], want_causal[i], 1e-12);
    }
  }
  auto bad = jit([](const Params& p, const Tensor& h) { return self_attention(p, "attn", h, {.heads = 3}); });
  EXPECT_THROW(bad(p, h), TraceError);
}

}  // namespace
}  // namespace fjit
