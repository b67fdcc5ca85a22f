// The language model under tensor parallelism (core/nn/tensor_parallel.h,
// core/nn/tensor_parallel_decoder.h, parallel/tensor_parallel_spec.h) on a 2 x 2 grid of
// thread replicas. Oracles: the unsplit layers (multi_head_attention with rotary positions and
// grouped-query attention, swiglu_mlp, decoder_logits) under jit, and 4-way data parallelism
// (pmap) for training. Tolerance for f32 results: 1e-5 of the oracle's largest magnitude; the
// split only reorders sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "fjit.h"
#include "tests/tensor_parallel_testing.h"

namespace fjit {
namespace {

constexpr double kRel = 1e-5;

using testing::random;
using testing::rel_err;
using testing::token_ids;

Mesh grid() { return Mesh::threads({{"data", 2}, {"model", 2}}); }

Tensor half_square(const Tensor& y) { return sum(y * y) * 0.5; }

// Forward, loss and gradients of tp_attention on the grid (batch over "data", heads over
// "model") against multi_head_attention under jit on the whole batch.
void expect_attention_matches(const MultiHeadAttentionOptions& o, int64_t dim) {
  ArrayDict p;
  multi_head_attention_params(p, "attn", dim, 7, o);
  if (o.bias) {
    p["attn/qkv/b"] = random(p["attn/qkv/b"].shape(), 8);
    p["attn/out/b"] = random({dim}, 9);
  }
  const ArrayDict tp = tp_attention_params(p, "attn");
  ShardSpec spec;
  tp_attention_spec(spec, "attn", "model", o.bias);
  const Array x = random({4, 6, dim}, 10);
  auto sm = shard_map([&](const TensorDict& q, const Tensor& xb) {
    auto fn = [&](const TensorDict& w, const Tensor& xx) { return tp_attention(w, "attn", xx, "model", o); };
    auto [loss, g] = value_and_grad([&](const TensorDict& w, const Tensor& xx) { return half_square(fn(w, xx)); })(q, xb);
    return std::tuple{fn(q, xb), psum(loss, "data"), psum(g, "data")};
  }, grid(), {spec, {"data"}}, {{"data"}, {}, spec});
  auto [y, loss, g] = sm(tp, x);
  auto ref = jit([&](const TensorDict& q, const Tensor& xx) {
    auto fn = [&](const TensorDict& w, const Tensor& xa) { return multi_head_attention(w, "attn", xa, o); };
    auto [l, gw] = value_and_grad([&](const TensorDict& w, const Tensor& xa) { return half_square(fn(w, xa)); })(q, xx);
    return std::tuple{fn(q, xx), l, gw};
  });
  auto [y0, loss0, g0] = ref(p, x);
  EXPECT_LE(rel_err(y, y0), kRel);
  EXPECT_LE(rel_err(loss, loss0), kRel);
  testing::expect_near_dict(g, tp_attention_params(g0, "attn"), "gradient", kRel);
}

TEST(TensorParallelAttention, RotaryPositionsMatchMultiHeadAttention) {
  MultiHeadAttentionOptions o;
  o.heads = 4;
  o.rotary = true;
  o.rope_theta = 500.0;
  expect_attention_matches(o, 16);
}

TEST(TensorParallelAttention, GroupedQueryAttentionMatchesMultiHeadAttention) {
  MultiHeadAttentionOptions o;
  o.heads = 8;
  o.kv_heads = 2;  // one kv head per replica, serving its 4 query heads
  o.bias = false;
  expect_attention_matches(o, 16);
  o.kv_heads = 4;  // two per replica
  o.bias = true;
  o.rotary = true;
  expect_attention_matches(o, 16);
}

// The fused qkv columns are H dh query columns, then KV dh key and KV dh value columns.
TEST(TensorParallelAttention, ParamsSplitTheFusedColumnsAtTheKvHeadBoundaries) {
  MultiHeadAttentionOptions o;
  o.heads = 4;
  o.kv_heads = 2;
  ArrayDict p;
  multi_head_attention_params(p, "a", 8, 3, o);  // qkv/w [8, 16]: q 8, k 4, v 4 columns
  p["a/qkv/b"] = random({16}, 4);
  const ArrayDict tp = tp_attention_params(p, "a");
  ASSERT_EQ(tp["a/q/w"].shape(), (Shape{8, 8}));
  ASSERT_EQ(tp["a/k/w"].shape(), (Shape{8, 4}));
  ASSERT_EQ(tp["a/v/b"].shape(), (Shape{4}));
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 4; ++c) {
      EXPECT_EQ(tp["a/k/w"].data<float>()[r * 4 + c], p["a/qkv/w"].data<float>()[r * 16 + 8 + c]);
      EXPECT_EQ(tp["a/v/w"].data<float>()[r * 4 + c], p["a/qkv/w"].data<float>()[r * 16 + 12 + c]);
    }
  for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(tp["a/v/b"].data<float>()[c], p["a/qkv/b"].data<float>()[12 + c]);
  ArrayDict bad;
  bad.set("a/qkv/w", Array::full(DType::f32, {8, 9}, 0.0));
  EXPECT_THROW(tp_attention_params(bad, "a"), std::invalid_argument);
}

TEST(TensorParallelAttention, KvHeadsThatTheAxisDoesNotDivideAreATraceErrorNamingTheLayer) {
  MultiHeadAttentionOptions o;
  o.heads = 4;
  o.kv_heads = 1;
  ArrayDict p;
  multi_head_attention_params(p, "attn", 8, 1, o);
  ShardSpec spec;
  tp_attention_spec(spec, "attn", "model");
  spec.entries.erase("attn/k/w");  // one kv head: not splittable, so keep k and v whole
  spec.entries.erase("attn/v/w");
  spec.entries.erase("attn/k/b");
  spec.entries.erase("attn/v/b");
  auto sm = shard_map([&](const TensorDict& q, const Tensor& x) { return tp_attention(q, "attn", x, "model", o); },
                      grid(), {spec, {}}, {{}});
  try {
    sm(tp_attention_params(p, "attn"), random({1, 2, 8}, 1));
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string w = e.what();
    for (const char* part : {"tp_attention", "kv_heads (1)", "axis 'model' (size 2)"})
      EXPECT_NE(w.find(part), std::string::npos) << part << " in: " << w;
  }
}

TEST(TensorParallelMlp, SwigluSplitEqualsTheUnsplitMlpForwardAndGradients) {
  ArrayDict p;
  swiglu_mlp_params(p, "mlp", 8, 12, 3);
  ShardSpec spec;
  tp_mlp_spec(spec, "mlp", "model", /*swiglu=*/true);
  const Array x = random({6, 8}, 6);
  auto sm = shard_map([](const TensorDict& q, const Tensor& xb) {
    auto [loss, g] = value_and_grad([](const TensorDict& w, const Tensor& xx) {
      return half_square(tp_swiglu_mlp(w, "mlp", xx, "model"));
    })(q, xb);
    return std::tuple{tp_swiglu_mlp(q, "mlp", xb, "model"), psum(g, "data")};
  }, grid(), {spec, {"data"}}, {{"data"}, spec});
  auto [y, g] = sm(p, x);
  auto ref = jit([](const TensorDict& q, const Tensor& xx) {
    return std::tuple{swiglu_mlp(q, "mlp", xx),
                      grad([](const TensorDict& w, const Tensor& xa) { return half_square(swiglu_mlp(w, "mlp", xa)); })(q, xx)};
  });
  auto [y0, g0] = ref(p, x);
  EXPECT_LE(rel_err(y, y0), kRel);
  testing::expect_near_dict(g, g0, "gradient", kRel);
}

DecoderConfig gpt() { return testing::tiny_gpt(); }
DecoderConfig llama() { return testing::tiny_llama(); }

// The LM trained kSteps SGD steps on 8 sequences: 4-way data parallelism (pmap of
// decoder_logits) against 2-way data x 2-way model (shard_map of tp_decoder_logits); the
// losses step by step and the final parameters agree.
void expect_two_by_two_trains_as_four_way_data(const DecoderConfig& c, const char* label) {
  ArrayDict p;
  decoder_params(p, c, 5);
  const Array ids = token_ids(8, c.context, c.vocab, 21), labels = token_ids(8, c.context, c.vocab, 22);
  constexpr double kLr = 0.5;
  constexpr int kSteps = 5;
  auto dp = testing::lm_data_parallel_step(Mesh::threads(4), c, kLr);
  auto tp = testing::lm_tensor_parallel_step(grid(), c, kLr);
  ArrayDict pd = p, pt = tp_decoder_params(p, c);
  std::printf("%s: %s\nstep  4-way data      2 data x 2 model\n", label, c.describe().c_str());
  for (int s = 0; s < kSteps; ++s) {
    auto [pd2, ld] = dp(pd, ids, labels);
    auto [pt2, lt] = tp(pt, ids, labels);
    const double a = ld.item<float>(), b = lt.item<float>();
    EXPECT_LE(std::abs(a - b), kRel * std::abs(a)) << label << " step " << s << ": 4-way data " << a << ", 2x2 " << b;
    std::printf("%d     %.9g   %.9g\n", s, a, b);
    pd = std::move(pd2);
    pt = std::move(pt2);
  }
  testing::expect_near_dict(pt, tp_decoder_params(pd, c), fmt::format("{} parameters", label), kRel);
}

TEST(TensorParallelDecoder, LogitsEqualTheUnsplitModelsForBothStyles) {
  for (DecoderConfig c : {gpt(), llama()}) {
    ArrayDict p;
    decoder_params(p, c, 9);
    const Array ids = token_ids(4, c.context, c.vocab, 3);
    auto sm = shard_map([&](const TensorDict& q, const Tensor& x) { return tp_decoder_logits(q, c, x, "model"); },
                        grid(), {tp_decoder_spec(c, "model"), {"data"}}, {{"data"}});
    auto ref = jit([&](const TensorDict& q, const Tensor& x) { return decoder_logits(q, c, x); });
    EXPECT_LE(rel_err(sm(tp_decoder_params(p, c), ids), ref(p, ids)), kRel) << c.describe();
  }
}

TEST(TensorParallelDecoder, GptStyleTrainedOnTwoByTwoMatchesFourWayDataParallelLosses) {
  expect_two_by_two_trains_as_four_way_data(gpt(), "gpt");
}

TEST(TensorParallelDecoder, LlamaStyleTrainedOnTwoByTwoMatchesFourWayDataParallelLosses) {
  expect_two_by_two_trains_as_four_way_data(llama(), "llama");
}

// remat recomputes each block, its collectives included, in the backward pass.
TEST(TensorParallelDecoder, RematTrainsAlike) {
  DecoderConfig c = llama();
  c.remat = true;
  c.layers = 1;
  expect_two_by_two_trains_as_four_way_data(c, "llama, remat");
}

}  // namespace
}  // namespace fjit
