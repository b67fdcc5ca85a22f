// The decoder language model (core/nn/decoder.h) in Hugging Face's two shapes: a Llama-like
// configuration (RMS norm, SwiGLU, rotary with its base, grouped-query attention, no attention
// bias, untied head) and a GPT-2-like one (tanh GELU, layer norm epsilon, tied embeddings):
// logits against a host loop in f64 (tests/nn_host_reference.h), the KV-cache decode step
// against the logits, bf16-stored parameters against f32 ones rounded to bf16, and the
// configuration's checks and description.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/ir/convert.h"
#include "parallel/fjit.h"
#include "tests/nn_host_reference.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

DecoderConfig llama_like() {
  DecoderConfig c;
  c.vocab = 13;
  c.context = 8;
  c.dim = 16;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.attention_bias = false;
  c.norm_eps = 1e-2;
  c.rope_theta = 5e5;
  c.rotary = true;
  c.tied_embeddings = false;
  c.norm = TransformerBlockOptions::Norm::kRmsNorm;
  c.mlp = TransformerBlockOptions::Mlp::kSwiglu;
  c.mlp_hidden = 24;
  return c;
}

DecoderConfig gpt2_like() {
  DecoderConfig c;
  c.vocab = 13;
  c.context = 8;
  c.dim = 16;
  c.layers = 2;
  c.heads = 4;
  c.norm_eps = 1e-5;
  c.gelu_tanh = true;
  return c;
}

const std::vector<int32_t> kSeq = {1, 4, 9, 2, 12, 0, 5};

Array ids_of(const std::vector<int32_t>& v) {
  return Array::from_vector(v, {1, static_cast<int64_t>(v.size())});
}

// Parameters with random gains and biases too (decoder_params makes them one and zero).
ArrayDict random_params(const DecoderConfig& c, DType dtype) {
  ArrayDict p;
  decoder_params(p, c, 3, DType::f64);
  uint64_t seed = 100;
  for (auto& [name, a] : p) {
    Array r = testing::random_f64(a.shape(), ++seed);
    const bool gain_or_bias = name.size() > 2 && (name.compare(name.size() - 2, 2, "/g") == 0 ||
                                                   name.compare(name.size() - 2, 2, "/b") == 0);
    Array out(dtype, a.shape());
    for (int64_t i = 0; i < a.size(); ++i)
      set_element_from_double(dtype, out.raw(), i, gain_or_bias ? 1 + 0.3 * r.data<double>()[i] : a.at_as_double(i) * 5);
    a = out;
  }
  return p;
}

// Every parameter converted to `dtype` (rounded once).
ArrayDict converted(const ArrayDict& p, DType dtype) {
  ArrayDict out;
  for (const auto& [name, a] : p) {
    Array b(dtype, a.shape());
    for (int64_t i = 0; i < a.size(); ++i) set_element_from_double(dtype, b.raw(), i, a.at_as_double(i));
    out.set(name, b);
  }
  return out;
}

Array logits_of(const ArrayDict& p, const DecoderConfig& c) {
  return jit([&c](const Params& q, const Tensor& ids) { return decoder_logits(q, c, ids); })(p, ids_of(kSeq));
}

void expect_matches_host(const DecoderConfig& c) {
  const ArrayDict p = random_params(c, DType::f64);
  const Array logits = logits_of(p, c);
  ASSERT_EQ(logits.shape(), (Shape{1, 7, c.vocab}));
  const testing::Vec want = testing::host_decoder(p, c, kSeq);
  for (int64_t i = 0; i < logits.size(); ++i)
    ASSERT_NEAR(logits.data<double>()[i], want[i], 1e-10) << c.describe() << " at " << i;
}

// decoder_step token by token gives decoder_logits' rows, with one trace.
void expect_decode_matches(const ArrayDict& p, const DecoderConfig& c, DType cache_dtype, double tol) {
  const Array full = logits_of(p, c);
  auto step = jit([&c](const Params& q, const TensorDict& cache, const Tensor& id, const Tensor& pos) {
    DecoderStep s = decoder_step(q, c, id, pos, cache);
    return std::tuple{s.logits, s.cache};
  });
  ArrayDict cache = decoder_cache(c, 1, cache_dtype);
  const int64_t kv = c.kv_heads == 0 ? c.heads : c.kv_heads;
  ASSERT_EQ(cache.at("k0").shape(), (Shape{1, kv, c.context, c.head_dim()}));
  for (int64_t t = 0; t < static_cast<int64_t>(kSeq.size()); ++t) {
    auto [logits, next] = step(p, cache, ids_of({kSeq[t]}), Array::scalar<int32_t>(static_cast<int32_t>(t)));
    cache = next;
    for (int64_t v = 0; v < c.vocab; ++v)
      ASSERT_NEAR(logits.at_as_double(v), full.at_as_double(t * c.vocab + v), tol)
          << "position " << t << " token " << v << " (" << c.describe() << ")";
  }
  EXPECT_EQ(step.core().trace_count(), 1) << "the decode step re-traced as the position grew";
}

TEST(NnHfDecoder, LlamaLikeParametersLogitsAndDecodeStep) {
  const DecoderConfig c = llama_like();
  ArrayDict p;
  decoder_params(p, c, 1);
  EXPECT_EQ(p.at("block0/attn/qkv/w").shape(), (Shape{16, (4 + 2 * 2) * 4}));
  EXPECT_FALSE(p.contains("block0/attn/qkv/b"));
  EXPECT_FALSE(p.contains("block1/attn/out/b"));
  EXPECT_FALSE(p.contains("pos/table"));
  EXPECT_EQ(p.at("head/w").shape(), (Shape{16, 13}));
  expect_matches_host(c);
  expect_decode_matches(random_params(c, DType::f64), c, DType::f64, 1e-12);
}

TEST(NnHfDecoder, Gpt2LikeLogitsAndDecodeStep) {
  const DecoderConfig c = gpt2_like();
  expect_matches_host(c);
  expect_decode_matches(random_params(c, DType::f64), c, DType::f64, 1e-12);
}

// bf16 parameters run in f32 and give the logits of the f32 parameters rounded to bf16.
TEST(NnHfDecoder, Bf16ParametersComputeInF32) {
  for (const DecoderConfig& c : {llama_like(), gpt2_like()}) {
    const ArrayDict f32 = random_params(c, DType::f32);
    const ArrayDict bf16 = converted(f32, DType::bf16), rounded = converted(bf16, DType::f32);
    const Array from_bf16 = logits_of(bf16, c), from_rounded = logits_of(rounded, c);
    ASSERT_EQ(from_bf16.dtype(), DType::f32);
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < from_bf16.size(); ++i) {
      scale = std::max(scale, std::abs(from_rounded.at_as_double(i)));
      worst = std::max(worst, std::abs(from_bf16.at_as_double(i) - from_rounded.at_as_double(i)));
    }
    EXPECT_LE(worst, 1e-6 * scale) << c.describe();
    // ... which are the host's logits of the rounded parameters, to f32's precision.
    const testing::Vec want = testing::host_decoder(rounded, c, kSeq);
    for (int64_t i = 0; i < from_bf16.size(); ++i)
      ASSERT_NEAR(from_bf16.at_as_double(i), want[i], 1e-4 * std::max(1.0, scale)) << c.describe() << " at " << i;
    // ... and not those of the unrounded parameters: the rounding is real.
    const Array unrounded = logits_of(f32, c);
    double moved = 0;
    for (int64_t i = 0; i < unrounded.size(); ++i)
      moved = std::max(moved, std::abs(unrounded.at_as_double(i) - from_bf16.at_as_double(i)));
    EXPECT_GT(moved, 1e-5 * scale) << c.describe();
    expect_decode_matches(bf16, c, DType::f32, 1e-4 * std::max(1.0, scale));
  }
}

TEST(NnHfDecoder, ValidateAndDescribe) {
  DecoderConfig c = llama_like();
  EXPECT_EQ(c.describe(),
            "2 layers, d 16, 4 heads (2 kv heads), context 8, vocab 13, rotary positions, swiglu, rms norm, "
            "no attention bias, norm eps 0.01, rope theta 500000");
  EXPECT_EQ(gpt2_like().describe(),
            "2 layers, d 16, 4 heads, context 8, vocab 13, learned positions, gelu (tanh), layer norm, "
            "norm eps 1e-05, tied embeddings");
  ArrayDict p;
  c.kv_heads = 3;
  EXPECT_NE(error_of<std::invalid_argument>([&] { decoder_params(p, c, 0); }).find("3 kv heads do not divide 4 heads"),
            std::string::npos);
  c = llama_like();
  c.norm_eps = -1;
  EXPECT_NE(error_of<std::invalid_argument>([&] { validate(c); }).find("norm eps"), std::string::npos);
  c = llama_like();
  c.rope_theta = 0;
  EXPECT_NE(error_of<std::invalid_argument>([&] { validate(c); }).find("rope theta"), std::string::npos);
  c = llama_like();
  c.kv_heads = -2;
  EXPECT_NE(error_of<std::invalid_argument>([&] { validate(c); }).find("sizes must be positive"), std::string::npos);
  EXPECT_TRUE(p.empty()) << "a refused configuration added parameters";
}

}  // namespace
}  // namespace fjit
