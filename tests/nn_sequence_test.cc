// The sequence layers of core/nn (rms_norm, rotary_embedding, multi_head_attention and its
// decode step, gelu_mlp, swiglu_mlp, transformer_block and its step) against plain host loops
// in f64, the decode steps against the whole-sequence layers, parameter names and shapes, and
// bad inputs' TraceErrors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "parallel/fjit.h"
#include "tests/nn_host_reference.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;
using testing::random_f64;
using Vec = std::vector<double>;

std::string here(int line) { return "nn_sequence_test.cc:" + std::to_string(line); }

// rows x [n, in] @ w [in, out] (+ b [out]) on the host.
Vec host_linear(const Vec& x, int64_t n, const ArrayDict& p, const std::string& name, bool bias = true) {
  const Array& w = p[name + "/w"];
  const int64_t in = w.shape()[0], out = w.shape()[1];
  Vec y(n * out);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias ? p[name + "/b"].data<double>()[o] : 0.0;
      for (int64_t k = 0; k < in; ++k) acc += x[r * in + k] * w.data<double>()[k * out + o];
      y[r * out + o] = acc;
    }
  return y;
}

Vec slice_of(const Array& a, int64_t begin, int64_t n) {
  return Vec(a.data<double>() + begin, a.data<double>() + begin + n);
}

// The closed form of rotary_embedding for one head vector v [dh] at `pos`.
void host_rotate(double* v, int64_t dh, double pos) {
  const int64_t h = dh / 2;
  for (int64_t i = 0; i < h; ++i) {
    const double th = pos * std::pow(10000.0, -2.0 * i / dh), a = v[i], b = v[i + h];
    v[i] = a * std::cos(th) - b * std::sin(th);
    v[i + h] = b * std::cos(th) + a * std::sin(th);
  }
}

struct HostAttention {
  int64_t heads = 1;
  bool causal = true, rotary = false, bias = true;
};

// multi_head_attention on the host for one sequence x [T, D]: keys j >= key_len are masked;
// a query with no visible key gets zeros before the out projection.
Vec host_mha(const Vec& x, int64_t t, int64_t d, const ArrayDict& p, const std::string& name,
             const HostAttention& o, int64_t key_len) {
  Vec qkv = host_linear(x, t, p, name + "/qkv", o.bias);  // [T, 3D]
  const int64_t dh = d / o.heads;
  if (o.rotary)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t hd = 0; hd < o.heads; ++hd)
        for (int64_t part = 0; part < 2; ++part) host_rotate(&qkv[i * 3 * d + part * d + hd * dh], dh, double(i));
  Vec mixed(t * d, 0.0);
  for (int64_t hd = 0; hd < o.heads; ++hd)
    for (int64_t i = 0; i < t; ++i) {
      Vec s(t);
      double m = -1e300;
      std::vector<bool> seen(t);
      for (int64_t j = 0; j < t; ++j) {
        seen[j] = (!o.causal || j <= i) && j < key_len;
        double dot = 0;
        for (int64_t k = 0; k < dh; ++k) dot += qkv[i * 3 * d + hd * dh + k] * qkv[j * 3 * d + d + hd * dh + k];
        s[j] = dot / std::sqrt(double(dh));
        if (seen[j]) m = std::max(m, s[j]);
      }
      double z = 0;
      for (int64_t j = 0; j < t; ++j) z += s[j] = seen[j] ? std::exp(s[j] - m) : 0.0;
      if (z == 0) continue;
      for (int64_t j = 0; j < t; ++j)
        for (int64_t k = 0; k < dh; ++k) mixed[i * d + hd * dh + k] += s[j] / z * qkv[j * 3 * d + 2 * d + hd * dh + k];
    }
  return host_linear(mixed, t, p, name + "/out", o.bias);
}

void expect_near(const Array& got, int64_t offset, const Vec& want, double tol, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.data<double>()[offset + i], want[i], tol) << what << " element " << i;
}

TEST(NnSequence, RmsNormMatchesTheHostLoop) {
  ArrayDict p;
  rms_norm_params(p, "norm", 5, DType::f64);
  EXPECT_EQ(p.names(), (std::vector<std::string>{"norm/g"}));
  EXPECT_EQ(p["norm/g"].at_as_double(4), 1.0);
  p.set("norm/g", random_f64({5}, 2));
  const Array x = random_f64({2, 3, 5}, 1);
  const Array y = jit([](const Params& p, const Tensor& x) { return rms_norm(p, "norm", x); })(p, x);
  for (int64_t r = 0; r < 6; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < 5; ++c) ms += x.data<double>()[r * 5 + c] * x.data<double>()[r * 5 + c] / 5;
    for (int64_t c = 0; c < 5; ++c)
      EXPECT_NEAR(y.data<double>()[r * 5 + c],
                  x.data<double>()[r * 5 + c] / std::sqrt(ms + 1e-6) * p["norm/g"].data<double>()[c], 1e-14);
  }
}

TEST(NnSequence, RotaryIsTheClosedFormKeepsNormsAndDependsOnRelativePositions) {
  const int64_t b = 2, t = 4, h = 3, dh = 6;
  const Array x = random_f64({b, t, h, dh}, 3);
  const Array pos = Array::from_vector<int32_t>({0, 3, 7, 100});
  auto rope = jit([](const Tensor& x, const Tensor& pos) { return rotary_embedding(x, pos); });
  const Array y = rope(x, pos);
  for (int64_t n = 0; n < b * t * h; ++n) {
    Vec v = slice_of(x, n * dh, dh);
    host_rotate(v.data(), dh, pos.data<int32_t>()[(n / h) % t]);
    double norm_x = 0, norm_y = 0;
    for (int64_t k = 0; k < dh; ++k) {
      EXPECT_NEAR(y.data<double>()[n * dh + k], v[k], 1e-12);
      norm_x += x.data<double>()[n * dh + k] * x.data<double>()[n * dh + k];
      norm_y += y.data<double>()[n * dh + k] * y.data<double>()[n * dh + k];
    }
    EXPECT_NEAR(norm_y, norm_x, 1e-12);
  }
  // q at position m, k at position n: q . k is the same after shifting both by s.
  const Array qk = random_f64({1, 2, 1, dh}, 4);
  auto dot = [&](int32_t m, int32_t n) {
    const Array r = rope(qk, Array::from_vector<int32_t>({m, n}));
    double s = 0;
    for (int64_t k = 0; k < dh; ++k) s += r.data<double>()[k] * r.data<double>()[dh + k];
    return s;
  };
  EXPECT_NEAR(dot(2, 7), dot(12, 17), 1e-12);
  EXPECT_NEAR(dot(5, 1), dot(105, 101), 1e-12);
  EXPECT_GT(std::abs(dot(2, 7) - dot(2, 8)), 1e-6);  // it does depend on the difference
}

TEST(NnSequence, MultiHeadAttentionMatchesTheHostLoopWithCausalPaddingAndRotary) {
  const int64_t b = 3, t = 5, d = 8;
  const Array x = random_f64({b, t, d}, 5);
  const Array lengths = Array::from_vector<int32_t>({5, 2, 0});  // the last: every key masked
  for (bool rotary : {false, true})
    for (bool bias : {true, false})
      for (bool causal : {true, false}) {
        const MultiHeadAttentionOptions o{.heads = 2, .causal = causal, .rotary = rotary, .bias = bias};
        ArrayDict p;
        multi_head_attention_params(p, "attn", d, 3, o, Init::glorot_uniform, DType::f64);
        if (bias) p.set("attn/qkv/b", random_f64({3 * d}, 4));
        auto f = jit([o](const Params& p, const Tensor& x, const Tensor& lengths) {
          return std::tuple{multi_head_attention(p, "attn", x, o),
                            multi_head_attention(p, "attn", x, o, lengths)};
        });
        auto [plain, padded] = f(p, x, lengths);
        ASSERT_EQ(plain.shape(), (Shape{b, t, d}));
        const HostAttention ho{2, causal, rotary, bias};
        for (int64_t n = 0; n < b; ++n) {
          const Vec xn = slice_of(x, n * t * d, t * d);
          const std::string what = "rotary " + std::to_string(rotary) + " bias " + std::to_string(bias) +
                                   " causal " + std::to_string(causal) + " batch " + std::to_string(n);
          expect_near(plain, n * t * d, host_mha(xn, t, d, p, "attn", ho, t), 1e-12, what);
          expect_near(padded, n * t * d, host_mha(xn, t, d, p, "attn", ho, lengths.data<int32_t>()[n]), 1e-12, what);
        }
      }
}

TEST(NnSequence, SelfAttentionIsMultiHeadAttentionWithItsDefaults) {
  ArrayDict p;
  self_attention_params(p, "attn", 8, 3, Init::glorot_uniform, DType::f64);
  const Array x = random_f64({2, 4, 8}, 6);
  auto f = jit([](const Params& p, const Tensor& x) {
    return std::tuple{self_attention(p, "attn", x, {.heads = 2}),
                      multi_head_attention(p, "attn", x, {.heads = 2, .causal = false})};
  });
  auto [a, b] = f(p, x);
  EXPECT_TRUE(a.bit_equal(b));
}


TEST(NnSequence, AttentionStepByStepReproducesTheCausalLayerWithOneTrace) {
  const int64_t b = 2, t = 6, d = 16, heads = 4, tmax = 9;
  const Array x = random_f64({b, t, d}, 7);
  // Plain and rotary multi-head attention, and grouped-query attention (one and two key/value
  // heads) with another rotary base.
  const MultiHeadAttentionOptions cases[] = {
      {.heads = heads, .causal = true, .rotary = false, .bias = true},
      {.heads = heads, .causal = true, .rotary = true, .bias = false},
      {.heads = heads, .causal = true, .rotary = true, .bias = false, .kv_heads = 1, .rope_theta = 1e6},
      {.heads = heads, .causal = true, .rotary = true, .bias = true, .kv_heads = 2, .rope_theta = 1e6}};
  for (const MultiHeadAttentionOptions& o : cases) {
    SCOPED_TRACE(fmt::format("rotary {} kv_heads {}", o.rotary, o.kv_heads));
    ArrayDict p;
    multi_head_attention_params(p, "attn", d, 3, o, Init::glorot_uniform, DType::f64);
    const Array full = jit([o](const Params& p, const Tensor& x) { return multi_head_attention(p, "attn", x, o); })(p, x);
    int traces = 0;
    auto step = jit([o, &traces](const Params& p, const Tensor& x, const Tensor& pos, const Tensor& ck, const Tensor& cv) {
      ++traces;
      AttentionStep s = multi_head_attention_step(p, "attn", x, pos, ck, cv, o);
      return std::tuple{s.y, s.cache_k, s.cache_v};
    });
    const int64_t kv = o.kv_heads == 0 ? heads : o.kv_heads;
    const Array stepped = testing::decode_token_by_token(step, p, x, kv, d / heads, tmax);
    for (int64_t i = 0; i < full.size(); ++i) ASSERT_NEAR(stepped.data<double>()[i], full.data<double>()[i], 1e-12) << i;
    EXPECT_EQ(traces, 1) << "a new position re-traced the step";
  }
}

TEST(NnSequence, MlpsMatchTheHostLoop) {
  const int64_t n = 4, d = 6, f = 10;
  ArrayDict p;
  gelu_mlp_params(p, "g", d, f, 1, Init::glorot_uniform, DType::f64);
  swiglu_mlp_params(p, "s", d, f, 5, Init::glorot_uniform, DType::f64);
  EXPECT_EQ(p.names(), (std::vector<std::string>{"g/fc/w", "g/fc/b", "g/proj/w", "g/proj/b", "s/gate/w",
                                                 "s/up/w", "s/down/w"}));
  EXPECT_EQ(p["g/fc/w"].shape(), (Shape{d, f}));
  EXPECT_EQ(p["s/down/w"].shape(), (Shape{f, d}));
  EXPECT_TRUE(p["s/up/w"].bit_equal(glorot_uniform({d, f}, 6, DType::f64)));
  p.set("g/fc/b", random_f64({f}, 9));
  const Array x = random_f64({n, d}, 8);
  auto [g, s] = jit([](const Params& p, const Tensor& x) {
    return std::tuple{gelu_mlp(p, "g", x), swiglu_mlp(p, "s", x)};
  })(p, x);
  const Vec xv = slice_of(x, 0, n * d);
  Vec h = host_linear(xv, n, p, "g/fc");
  for (double& v : h) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  expect_near(g, 0, host_linear(h, n, p, "g/proj"), 1e-13, "gelu_mlp");
  Vec gate = host_linear(xv, n, p, "s/gate", false), up = host_linear(xv, n, p, "s/up", false);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
  expect_near(s, 0, host_linear(gate, n, p, "s/down", false), 1e-13, "swiglu_mlp");
}

TEST(NnSequence, TransformerBlockMatchesTheHostLoop) {
  const int64_t b = 2, t = 4, d = 8;
  const TransformerBlockOptions o{.attention = {.heads = 2}, .mlp_hidden = 12};
  ArrayDict p;
  transformer_block_params(p, "blk", d, 11, o, Init::glorot_uniform, DType::f64);
  EXPECT_EQ(p.names(), (std::vector<std::string>{"blk/norm1/g", "blk/norm1/b", "blk/attn/qkv/w", "blk/attn/qkv/b",
                                                 "blk/attn/out/w", "blk/attn/out/b", "blk/norm2/g", "blk/norm2/b",
                                                 "blk/mlp/fc/w", "blk/mlp/fc/b", "blk/mlp/proj/w", "blk/mlp/proj/b"}));
  EXPECT_EQ(p["blk/mlp/fc/w"].shape(), (Shape{d, 12}));
  EXPECT_TRUE(p["blk/attn/out/w"].bit_equal(glorot_uniform({d, d}, 12, DType::f64)));
  EXPECT_TRUE(p["blk/mlp/proj/w"].bit_equal(glorot_uniform({12, d}, 14, DType::f64)));
  p.set("blk/norm1/g", random_f64({d}, 20));
  p.set("blk/norm2/b", random_f64({d}, 21));
  const Array x = random_f64({b, t, d}, 9);
  const Array y = jit([o](const Params& p, const Tensor& x) { return transformer_block(p, "blk", x, o); })(p, x);
  auto host_ln = [&](Vec v, const std::string& name) {
    for (int64_t r = 0; r < t; ++r) {
      double mu = 0, var = 0;
      for (int64_t c = 0; c < d; ++c) mu += v[r * d + c] / d;
      for (int64_t c = 0; c < d; ++c) var += (v[r * d + c] - mu) * (v[r * d + c] - mu) / d;
      for (int64_t c = 0; c < d; ++c)
        v[r * d + c] = (v[r * d + c] - mu) / std::sqrt(var + 1e-5) * p[name + "/g"].data<double>()[c] +
                       p[name + "/b"].data<double>()[c];
    }
    return v;
  };
  for (int64_t n = 0; n < b; ++n) {
    Vec h = slice_of(x, n * t * d, t * d);
    const Vec a = host_mha(host_ln(h, "blk/norm1"), t, d, p, "blk/attn", {2, true, false, true}, t);
    for (int64_t i = 0; i < t * d; ++i) h[i] += a[i];
    Vec m = host_linear(host_ln(h, "blk/norm2"), t, p, "blk/mlp/fc");
    for (double& v : m) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    m = host_linear(m, t, p, "blk/mlp/proj");
    for (int64_t i = 0; i < t * d; ++i) h[i] += m[i];
    expect_near(y, n * t * d, h, 1e-12, "batch " + std::to_string(n));
  }
}

TEST(NnSequence, LlamaBlockStepByStepReproducesTheBlock) {
  const int64_t b = 2, t = 5, d = 8, heads = 2;
  const TransformerBlockOptions o{.attention = {.heads = heads, .causal = true, .rotary = true, .bias = false},
                                  .norm = TransformerBlockOptions::Norm::kRmsNorm,
                                  .mlp = TransformerBlockOptions::Mlp::kSwiglu};
  ArrayDict p;
  transformer_block_params(p, "blk", d, 2, o, Init::glorot_uniform, DType::f64);
  EXPECT_EQ(p.names(), (std::vector<std::string>{"blk/norm1/g", "blk/attn/qkv/w", "blk/attn/out/w", "blk/norm2/g",
                                                 "blk/mlp/gate/w", "blk/mlp/up/w", "blk/mlp/down/w"}));
  EXPECT_EQ(p["blk/mlp/gate/w"].shape(), (Shape{d, 4 * d}));
  const Array x = random_f64({b, t, d}, 10);
  const Array full = jit([o](const Params& p, const Tensor& x) { return transformer_block(p, "blk", x, o); })(p, x);
  auto step = jit([o](const Params& p, const Tensor& x, const Tensor& pos, const Tensor& ck, const Tensor& cv) {
    AttentionStep s = transformer_block_step(p, "blk", x, pos, ck, cv, o);
    return std::tuple{s.y, s.cache_k, s.cache_v};
  });
  const Array stepped = testing::decode_token_by_token(step, p, x, heads, d / heads, t);
  for (int64_t i = 0; i < full.size(); ++i) ASSERT_NEAR(stepped.data<double>()[i], full.data<double>()[i], 1e-12) << i;
}

TEST(NnSequence, BadInputsNameTheLayerAndTheCallSite) {
  ArrayDict p;
  multi_head_attention_params(p, "attn", 6, 1, {.heads = 2});
  rms_norm_params(p, "norm", 4);
  const Array x = testing::random_f32({1, 3, 6}, 1);
  int line = 0;
  std::string m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      line = __LINE__ + 1;
      return multi_head_attention(p, "attn", x, {.heads = 4});
    })(p, x);
  });
  EXPECT_NE(m.find("multi_head_attention"), std::string::npos) << m;
  EXPECT_NE(m.find("must divide"), std::string::npos) << m;
  EXPECT_NE(m.find(here(line)), std::string::npos) << m;
  m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      line = __LINE__ + 1;
      return multi_head_attention(p, "attn", x, {.heads = 2, .rotary = true});  // dh = 3: odd
    })(p, x);
  });
  EXPECT_NE(m.find("rotary"), std::string::npos) << m;
  EXPECT_NE(m.find(here(line)), std::string::npos) << m;
  m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      line = __LINE__ + 1;
      return multi_head_attention(p, "attn", x, {.heads = 2}, full(DType::f32, {1}, 3.0));
    })(p, x);
  });
  EXPECT_NE(m.find("key_lengths"), std::string::npos) << m;
  EXPECT_NE(m.find(here(line)), std::string::npos) << m;
  m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      line = __LINE__ + 1;
      return rms_norm(p, "norm", x);  // g [4] against 6 features
    })(p, x);
  });
  EXPECT_NE(m.find("rms_norm"), std::string::npos) << m;
  EXPECT_NE(m.find(here(line)), std::string::npos) << m;
  m = error_of<TraceError>([&] {
    jit([&](const Tensor& x) {
      line = __LINE__ + 1;
      return rotary_embedding(reshape(x, {1, 3, 2, 3}), iota(DType::i32, {3}));
    })(x);
  });
  EXPECT_NE(m.find("rotary_embedding"), std::string::npos) << m;
  EXPECT_NE(m.find("even"), std::string::npos) << m;
  EXPECT_NE(m.find(here(line)), std::string::npos) << m;
  m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      line = __LINE__ + 1;
      AttentionStep s = multi_head_attention_step(p, "attn", x, iota(DType::i32, {1}), zeros_like(x), zeros_like(x),
                                                  {.heads = 2});
      return s.y;
    })(p, x);
  });
  EXPECT_NE(m.find("multi_head_attention_step"), std::string::npos) << m;
  EXPECT_NE(m.find(here(line)), std::string::npos) << m;
  m = error_of<TraceError>([&] {
    jit([&](const Params& p, const Tensor& x) {
      line = __LINE__ + 1;
      return transformer_block(p, "blk", reshape(x, {3, 6}), {});
    })(p, x);
  });
  EXPECT_NE(m.find("transformer_block"), std::string::npos) << m;
  EXPECT_NE(m.find(here(line)), std::string::npos) << m;
}

}  // namespace
}  // namespace fjit
