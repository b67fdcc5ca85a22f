// The decoder language model (core/nn/decoder.h) and what train_lm builds on it
// (parallel/lm/): the KV-cache decode step against the whole-sequence logits, GPT and
// Llama-style configurations, remat's gradients, the parameter names and the initialization
// scheme, the step's token-id check naming the bad position, and generation compiling one
// step whatever the length.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

DecoderConfig tiny(bool llama = false) {
  DecoderConfig c;
  c.vocab = 11;
  c.context = 7;
  c.dim = 8;
  c.layers = 2;
  c.heads = 2;
  if (llama) {
    c.rotary = true;
    c.tied_embeddings = false;
    c.norm = TransformerBlockOptions::Norm::kRmsNorm;
    c.mlp = TransformerBlockOptions::Mlp::kSwiglu;
  }
  return c;
}

Array ids_of(const std::vector<int32_t>& v, int64_t rows) {
  return Array::from_vector(v, {rows, static_cast<int64_t>(v.size()) / rows});
}

// Feeding a sequence token by token through decoder_step gives the logits decoder_logits gives
// for the whole sequence at each position (f64, both model styles).
void expect_decode_matches(const DecoderConfig& c) {
  ArrayDict p;
  decoder_params(p, c, 3, DType::f64);
  const std::vector<int32_t> seq = {1, 4, 9, 2, 10, 0, 5};
  const Array full = jit([&c](const Params& q, const Tensor& ids) { return decoder_logits(q, c, ids); })(
      p, ids_of(seq, 1));  // [1, T, V]
  auto step = jit([&c](const Params& q, const TensorDict& cache, const Tensor& id, const Tensor& pos) {
    DecoderStep s = decoder_step(q, c, id, pos, cache);
    return std::tuple{s.logits, s.cache};
  });
  ArrayDict cache = decoder_cache(c, 1, DType::f64);
  for (int64_t t = 0; t < static_cast<int64_t>(seq.size()); ++t) {
    auto [logits, next] = step(p, cache, ids_of({seq[t]}, 1), Array::scalar<int32_t>(static_cast<int32_t>(t)));
    cache = next;
    for (int64_t v = 0; v < c.vocab; ++v)
      EXPECT_NEAR(logits.data<double>()[v], full.data<double>()[t * c.vocab + v], 1e-12)
          << "position " << t << " token " << v << " (" << c.describe() << ")";
  }
  EXPECT_EQ(step.core().trace_count(), 1) << "the decode step re-traced as the position grew";
}

TEST(Decoder, GptDecodeStepMatchesTheWholeSequence) { expect_decode_matches(tiny(false)); }
TEST(Decoder, LlamaStyleDecodeStepMatchesTheWholeSequence) { expect_decode_matches(tiny(true)); }

TEST(Decoder, ParametersFollowGpt2Initialization) {
  DecoderConfig c = tiny();
  c.dim = 64;
  c.heads = 4;
  c.layers = 8;
  ArrayDict p;
  decoder_params(p, c, 1);
  EXPECT_EQ(p.names().front(), "tok/table");
  EXPECT_EQ(p.at("pos/table").shape(), (Shape{c.context, c.dim}));
  EXPECT_FALSE(p.contains("head/w")) << "tied embeddings have no head";
  auto stddev = [&](const std::string& name) {
    const Array& a = p.at(name);
    double s = 0;
    for (int64_t i = 0; i < a.size(); ++i) s += a.data<float>()[i] * static_cast<double>(a.data<float>()[i]);
    return std::sqrt(s / static_cast<double>(a.size()));
  };
  EXPECT_NEAR(stddev("block0/attn/qkv/w"), 0.02, 0.002);
  EXPECT_NEAR(stddev("block3/mlp/fc/w"), 0.02, 0.002);
  // Projections into the residual stream: 0.02 / sqrt(2 * layers) = 0.005.
  EXPECT_NEAR(stddev("block0/attn/out/w"), 0.005, 0.0008);
  EXPECT_NEAR(stddev("block5/mlp/proj/w"), 0.005, 0.0008);
  EXPECT_EQ(stddev("block0/attn/qkv/b"), 0.0);
  EXPECT_EQ(p.at("norm/g").data<float>()[0], 1.0f);
  ArrayDict again;
  decoder_params(again, c, 1);
  EXPECT_EQ(0, std::memcmp(again.at("block2/mlp/fc/w").data<float>(), p.at("block2/mlp/fc/w").data<float>(),
                           p.at("block2/mlp/fc/w").nbytes()))
      << "the same seed gives the same bits";
}

TEST(Decoder, RematGivesTheSameGradients) {
  DecoderConfig c = tiny(), r = tiny();
  r.remat = true;
  ArrayDict p;
  decoder_params(p, c, 5, DType::f64);
  const Array ids = ids_of({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2), targets = ids_of({2, 3, 4, 5, 0, 7, 8, 9, 10, 1}, 2);
  auto grads = [&](const DecoderConfig& cfg) {
    return jit([cfg](const Params& q, const Tensor& x, const Tensor& y) {
      return grad([&](const Params& w) { return mean(softmax_cross_entropy(decoder_logits(w, cfg, x), y)); })(q);
    })(p, ids, targets);
  };
  const ArrayDict plain = grads(c), rematted = grads(r);
  ASSERT_EQ(plain.names(), rematted.names());
  for (const std::string& name : plain.names())
    for (int64_t i = 0; i < plain.at(name).size(); ++i)
      ASSERT_NEAR(plain.at(name).data<double>()[i], rematted.at(name).data<double>()[i], 1e-13) << name;
}

TEST(Decoder, BadConfigurationsAndInputs) {
  DecoderConfig c = tiny();
  c.heads = 3;
  ArrayDict p;
  EXPECT_NE(error_of<std::invalid_argument>([&] { decoder_params(p, c, 0); }).find("3 heads do not divide d 8"),
            std::string::npos);
  c = tiny();
  decoder_params(p, c, 0);
  const std::string what = error_of<TraceError>([&] {
    jit([&c](const Params& q, const Tensor& ids) { return decoder_logits(q, c, ids); })(p, ids_of({1, 2, 3, 4, 5, 6, 7, 8}, 1));
  });
  EXPECT_NE(what.find("8 tokens exceed the model's context of 7"), std::string::npos) << what;
  EXPECT_NE(what.find("lm_test.cc"), std::string::npos) << what;
}

// The training step's token check names the first bad position of the shard.
TEST(LmStep, TokenIdOutOfRangeNamesRowAndColumn) {
  const DecoderConfig c = tiny();
  Mesh mesh = Mesh::threads(1);
  PmapOptions o;
  o.jit.checks = CheckMode::user;
  lm::LmStep step = lm::make_lm_step(mesh, lm::LmStepFn{.model = c}, o);
  ArrayDict p;
  decoder_params(p, c, 0);
  const ArrayDict s = AdamW{}.init_state(p);
  const Array x = ids_of({1, 2, 3, 4, 5, 6, 7, 8}, 2);
  const Array good = ids_of({2, 3, 4, 5, 6, 7, 8, 9}, 2), bad = ids_of({2, 3, 4, 5, 6, 7, 11, 9}, 2);
  const Array step_no = Array::scalar<int32_t>(0);
  lm::LmStepOut out;
  step.run_into(out, p, s, x, good, step_no);
  EXPECT_TRUE(std::isfinite(std::get<2>(out).item<double>()));
  const std::string what = error_of<CheckError>([&] { step.run_into(out, p, s, x, bad, step_no); });
  EXPECT_NE(what.find("target token ids must be in [0, 11): id 11 at row 1 column 2 of this shard"),
            std::string::npos) << what;
}

TEST(Generate, OneCompiledStepWhateverTheLength) {
  const DecoderConfig c = tiny();
  ArrayDict p;
  decoder_params(p, c, 0);
  const lm::Generated g = lm::generate(p, c, "\x01\x02", {.new_tokens = 4, .temperature = 1.0, .top_k = 3, .seed = 9});
  EXPECT_EQ(g.prompt_tokens, 2);
  EXPECT_EQ(g.new_tokens, 4);
  EXPECT_EQ(g.compiles, 1);
  for (char ch : g.text) EXPECT_LT(static_cast<unsigned char>(ch), c.vocab);
  const lm::Generated again = lm::generate(p, c, "\x01\x02", {.new_tokens = 4, .temperature = 1.0, .top_k = 3, .seed = 9});
  EXPECT_EQ(g.text, again.text) << "the same seed gives the same text";
  // The context bounds the length: after 2 prompt tokens, a 7-token context has 5 more positions,
  // and the last of them predicts a 6th new token.
  EXPECT_EQ(lm::generate(p, c, "\x01\x02", {.new_tokens = 50}).new_tokens, 6);
  EXPECT_NE(error_of<std::invalid_argument>([&] { lm::generate(p, c, "", {}); }).find("prompt is empty"),
            std::string::npos);
}

}  // namespace
}  // namespace fjit
