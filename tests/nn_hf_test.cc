// The options of core/nn that Hugging Face's GPT-2 and Llama need: grouped-query attention
// (kv_heads), the rotary base (rope_theta), the norms' epsilon and the tanh GELU, against
// plain host loops in f64 (tests/nn_host_reference.h); the GQA decode step against the causal
// layer; a GQA block's gradient against central differences; bad options' errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "parallel/fjit.h"
#include "tests/nn_host_reference.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;
using testing::HostAttention;
using testing::random_f64;
using testing::Vec;

Vec slice_of(const Array& a, int64_t begin, int64_t n) {
  return Vec(a.data<double>() + begin, a.data<double>() + begin + n);
}

void expect_near(const Array& got, int64_t offset, const Vec& want, double tol, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.data<double>()[offset + i], want[i], tol) << what << " element " << i;
}

double max_abs_diff(const Array& a, const Array& b) {
  double m = 0;
  for (int64_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a.at_as_double(i) - b.at_as_double(i)));
  return m;
}

TEST(NnHf, GroupedQueryAttentionMatchesTheHostLoop) {
  const int64_t b = 2, t = 5, d = 16, heads = 4, dh = 4;
  const Array x = random_f64({b, t, d}, 5);
  for (int64_t kv : {1, 2, 4})
    for (bool rotary : {false, true})
      for (bool bias : {true, false}) {
        const MultiHeadAttentionOptions o{.heads = heads, .causal = true, .rotary = rotary, .bias = bias,
                                          .kv_heads = kv, .rope_theta = 500000.0};
        ArrayDict p;
        multi_head_attention_params(p, "attn", d, 3, o, Init::glorot_uniform, DType::f64);
        ASSERT_EQ(p.at("attn/qkv/w").shape(), (Shape{d, (heads + 2 * kv) * dh}));
        ASSERT_EQ(p.at("attn/out/w").shape(), (Shape{d, d}));
        if (bias) p.set("attn/qkv/b", random_f64({(heads + 2 * kv) * dh}, 4));
        const Array y = jit([o](const Params& p, const Tensor& x) { return multi_head_attention(p, "attn", x, o); })(p, x);
        const HostAttention ho{heads, kv, true, rotary, bias, 500000.0};
        for (int64_t n = 0; n < b; ++n)
          expect_near(y, n * t * d, testing::host_attention(slice_of(x, n * t * d, t * d), t, d, p, "attn", ho), 1e-12,
                      fmt::format("kv {} rotary {} bias {} batch {}", kv, rotary, bias, n));
      }
}

TEST(NnHf, RopeThetaIsTheRotaryBase) {
  const int64_t d = 8;
  const Array x = random_f64({1, 6, d}, 8);
  ArrayDict p;
  multi_head_attention_params(p, "attn", d, 1, {.heads = 2, .bias = false}, Init::glorot_uniform, DType::f64);
  auto run = [&](double theta) {
    const MultiHeadAttentionOptions o{.heads = 2, .causal = true, .rotary = true, .bias = false, .rope_theta = theta};
    return jit([o](const Params& p, const Tensor& x) { return multi_head_attention(p, "attn", x, o); })(p, x);
  };
  const Array y = run(1e6), standard = run(10000.0);
  expect_near(y, 0, testing::host_attention(slice_of(x, 0, 6 * d), 6, d, p, "attn", {2, 2, true, true, false, 1e6}),
              1e-12, "theta 1e6");
  EXPECT_GT(max_abs_diff(y, standard), 1e-4) << "rope_theta made no difference";
}


// The grouped-query decode step: nn_sequence_test.cc, AttentionStepByStep...

TEST(NnHf, GeluTanhMlpIsTheClosedForm) {
  const int64_t n = 4, d = 6, f = 10;
  ArrayDict p;
  gelu_mlp_params(p, "g", d, f, 1, Init::glorot_uniform, DType::f64);
  p.set("g/fc/b", random_f64({f}, 9));
  const Array x = random_f64({n, d}, 8);
  auto [approx, exact] = jit([](const Params& p, const Tensor& x) {
    return std::tuple{gelu_mlp(p, "g", x, true), gelu_mlp(p, "g", x, false)};
  })(p, x);
  const Vec xv = slice_of(x, 0, n * d);
  for (bool tanh_form : {true, false}) {
    Vec h = testing::host_linear(xv, n, p, "g/fc", true);
    for (double& v : h) v = testing::host_gelu(v, tanh_form);
    expect_near(tanh_form ? approx : exact, 0, testing::host_linear(h, n, p, "g/proj", true), 1e-13,
                tanh_form ? "tanh" : "erf");
  }
  EXPECT_GT(max_abs_diff(approx, exact), 1e-6) << "the approximation is not the exact GELU";
}

TEST(NnHf, BlocksWithNormEpsGeluTanhAndGqaMatchTheHostLoop) {
  const int64_t b = 2, t = 4, d = 8;
  using O = TransformerBlockOptions;
  const std::vector<O> options = {
      {.attention = {.heads = 2}, .mlp_hidden = 12, .norm_eps = 0.25, .gelu_tanh = true},  // GPT-2-like
      {.attention = {.heads = 4, .causal = true, .rotary = true, .bias = false, .kv_heads = 2, .rope_theta = 5e5},
       .norm = O::Norm::kRmsNorm, .mlp = O::Mlp::kSwiglu, .norm_eps = 0.5}};  // Llama-like
  const Array x = random_f64({b, t, d}, 9);
  for (size_t k = 0; k < options.size(); ++k) {
    const O& o = options[k];
    ArrayDict p;
    transformer_block_params(p, "blk", d, 11, o, Init::glorot_uniform, DType::f64);
    p.set("blk/norm1/g", random_f64({d}, 20));
    auto run = [&](const O& opts) {
      return jit([opts](const Params& p, const Tensor& x) { return transformer_block(p, "blk", x, opts); })(p, x);
    };
    const Array y = run(o);
    for (int64_t n = 0; n < b; ++n)
      expect_near(y, n * t * d, testing::host_block(slice_of(x, n * t * d, t * d), t, d, p, "blk", o), 1e-12,
                  fmt::format("options {} batch {}", k, n));
    O default_eps = o;
    default_eps.norm_eps = 0;
    EXPECT_GT(max_abs_diff(y, run(default_eps)), 1e-3) << "norm_eps made no difference, options " << k;
  }
}

// d/dtheta sum(block(x) * r) against central differences, for the parameters and x (f64).
TEST(NnHf, GroupedQueryBlockGradientMatchesFiniteDifferences) {
  const int64_t b = 1, t = 3, d = 8;
  const TransformerBlockOptions o{
      .attention = {.heads = 4, .causal = true, .rotary = true, .bias = true, .kv_heads = 2, .rope_theta = 300.0},
      .norm = TransformerBlockOptions::Norm::kRmsNorm, .mlp = TransformerBlockOptions::Mlp::kSwiglu,
      .mlp_hidden = 6};
  ArrayDict p;
  transformer_block_params(p, "blk", d, 4, o, Init::glorot_uniform, DType::f64);
  p.set("blk/attn/qkv/b", random_f64({(4 + 4) * 2}, 6));
  p.set("x", random_f64({b, t, d}, 5));
  const Array r = random_f64({b, t, d}, 7);
  auto loss = [o](const Params& q, const Tensor& r) { return sum(mul(transformer_block(q, "blk", q["x"], o), r)); };
  auto value = jit(loss);
  const ArrayDict g = jit([loss](const Params& q, const Tensor& r) {
    return grad([&](const Params& w) { return loss(w, r); })(q);
  })(p, r);
  ASSERT_EQ(g.names(), p.names());
  const double h = 1e-6;
  for (const std::string& name : p.names()) {
    const int64_t n = p.at(name).size();
    for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 12)) {
      auto at = [&](double delta) {
        ArrayDict q = p;
        Array moved = p.at(name).clone();
        moved.data<double>()[i] += delta;
        q.set(name, moved);
        return value(q, r).item<double>();
      };
      const double fd = (at(h) - at(-h)) / (2 * h);
      EXPECT_NEAR(g.at(name).data<double>()[i], fd, 1e-6 * std::max(1.0, std::abs(fd))) << name << "[" << i << "]";
    }
  }
}

TEST(NnHf, BadOptionsNameTheLayerAndTheCallSite) {
  ArrayDict p;
  multi_head_attention_params(p, "attn", 8, 1, {.heads = 4, .kv_heads = 2});
  const Array x = testing::random_f32({1, 3, 8}, 1);
  int line = 0;
  const std::string here = "nn_hf_test.cc:";
  std::string m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      line = __LINE__ + 1;
      return multi_head_attention(p, "attn", x, {.heads = 4, .kv_heads = 3});
    })(p, x);
  });
  EXPECT_NE(m.find("multi_head_attention"), std::string::npos) << m;
  EXPECT_NE(m.find("kv_heads (3) must divide heads (4)"), std::string::npos) << m;
  EXPECT_NE(m.find("f32[1,3,8]"), std::string::npos) << m;
  EXPECT_NE(m.find(here + std::to_string(line)), std::string::npos) << m;
  m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      line = __LINE__ + 1;
      return multi_head_attention(p, "attn", x, {.heads = 4, .rotary = true, .kv_heads = 2, .rope_theta = 0});
    })(p, x);
  });
  EXPECT_NE(m.find("rope_theta must be positive"), std::string::npos) << m;
  EXPECT_NE(m.find(here + std::to_string(line)), std::string::npos) << m;
  // The caches of a GQA step hold kv_heads heads, not heads.
  m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      const Tensor one = slice(x, {0, 0, 0}, {1, 1, 8});
      line = __LINE__ + 1;
      AttentionStep s = multi_head_attention_step(p, "attn", one, scalar(DType::i32, 0), full(DType::f32, {1, 4, 5, 2}, 0.0),
                                                  full(DType::f32, {1, 4, 5, 2}, 0.0), {.heads = 4, .kv_heads = 2});
      return s.y;
    })(p, x);
  });
  EXPECT_NE(m.find("multi_head_attention_step"), std::string::npos) << m;
  EXPECT_NE(m.find("f32[1,2,-1,2]"), std::string::npos) << m;
  EXPECT_NE(m.find(here + std::to_string(line)), std::string::npos) << m;
  m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      line = __LINE__ + 1;
      return transformer_block(p, "blk", x, {.attention = {.heads = 4, .kv_heads = 2}, .norm_eps = -1});
    })(p, x);
  });
  EXPECT_NE(m.find("norm_eps"), std::string::npos) << m;
  EXPECT_NE(m.find(here + std::to_string(line)), std::string::npos) << m;
  ArrayDict q;
  m = error_of<std::invalid_argument>([&] { multi_head_attention_params(q, "a", 8, 1, {.heads = 4, .kv_heads = 3}); });
  EXPECT_NE(m.find("kv_heads (3) must divide heads (4)"), std::string::npos) << m;
}

}  // namespace
}  // namespace fjit
