// Generation (the KV-cache decode step) under tensor parallelism: tp_decoder_step
// (core/nn/tensor_parallel_decoder.h) on 2 thread replicas of a "model" axis, each holding half
// the heads' weights and K/V cache and half the MLP's hidden features, against decoder_step
// (core/nn/decoder.h) under jit on the same weights. Both run greedy generation on their own;
// the tokens are equal and the logits agree within 1e-5 of their largest magnitude (the split
// only reorders the out projections' and the MLP's sums), for GPT's style and Llama's (rotary,
// grouped-query, SwiGLU, untied head); a step all-reduces twice per block, as training's
// forward pass does.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fjit.h"
#include "tests/tensor_parallel_testing.h"

namespace fjit {
namespace {

constexpr double kRel = 1e-5;
constexpr int64_t kBatch = 2, kPrompt = 3;

DecoderConfig gpt() { return testing::tiny_gpt(12); }
DecoderConfig llama() { return testing::tiny_llama(12); }

Mesh model_axis() { return Mesh::threads({{"model", 2}}); }

auto tp_step(const DecoderConfig& c, const Mesh& mesh) {
  const ShardSpec cache = tp_decoder_cache_spec(c, "model");
  return shard_map(
      [c](const TensorDict& q, const Tensor& ids, const Tensor& pos, const TensorDict& kv) {
        DecoderStep s = tp_decoder_step(q, c, ids, pos, kv, "model");
        return std::tuple{s.logits, s.cache};
      },
      mesh, {tp_decoder_spec(c, "model"), {}, {}, cache}, {{}, cache});
}

// The generation: per step, the logits [B, vocab] and the tokens fed next.
struct Generation {
  std::vector<Array> logits;
  std::vector<std::vector<int32_t>> tokens;
  ArrayDict cache;
};

// Greedy generation until the context is full: the prompt's tokens one at a time, then each
// argmax. `step` maps (params, ids [B, 1], pos, cache) to (logits, cache').
template <class Step>
Generation generate(Step& step, const ArrayDict& params, const DecoderConfig& c, const Array& prompt) {
  Generation r;
  r.cache = decoder_cache(c, kBatch);
  Array ids(DType::i32, {kBatch, 1});
  for (int64_t b = 0; b < kBatch; ++b) ids.data<int32_t>()[b] = prompt.data<int32_t>()[b * kPrompt];
  for (int32_t pos = 0; pos + 1 < c.context; ++pos) {
    auto [logits, cache] = step(params, ids, Array::scalar<int32_t>(pos), r.cache);
    r.cache = std::move(cache);
    std::vector<int32_t> next(kBatch);
    for (int64_t b = 0; b < kBatch; ++b) {
      if (pos + 1 < kPrompt) {
        next[b] = prompt.data<int32_t>()[b * kPrompt + pos + 1];
        continue;
      }
      const float* row = logits.template data<float>() + b * c.vocab;
      int32_t best = 0;
      for (int32_t v = 1; v < c.vocab; ++v)
        if (row[v] > row[best]) best = v;
      next[b] = best;
    }
    for (int64_t b = 0; b < kBatch; ++b) ids.data<int32_t>()[b] = next[b];
    r.logits.push_back(logits);
    r.tokens.push_back(next);
  }
  return r;
}

TEST(TensorParallelDecode, GreedyTokensEqualTheUnsplitDecodeForBothStyles) {
  for (const DecoderConfig& c : {gpt(), llama()}) {
    SCOPED_TRACE(c.describe());
    ArrayDict p;
    decoder_params(p, c, 13);
    const Array prompt = testing::token_ids(kBatch, kPrompt, c.vocab, 5);
    auto ref = jit([c](const TensorDict& q, const Tensor& ids, const Tensor& pos, const TensorDict& kv) {
      DecoderStep s = decoder_step(q, c, ids, pos, kv);
      return std::tuple{s.logits, s.cache};
    });
    auto tp = tp_step(c, model_axis());
    const Generation want = generate(ref, p, c, prompt), got = generate(tp, tp_decoder_params(p, c), c, prompt);
    ASSERT_EQ(got.tokens.size(), want.tokens.size());
    for (size_t s = 0; s < want.tokens.size(); ++s) {
      EXPECT_EQ(got.tokens[s], want.tokens[s]) << "step " << s;
      EXPECT_LE(testing::rel_err(got.logits[s], want.logits[s]), kRel) << "step " << s;
    }
    // Not a constant: the greedy tokens vary, so equal tokens say something.
    std::set<int32_t> generated;
    for (size_t s = kPrompt - 1; s < want.tokens.size(); ++s) generated.insert(want.tokens[s].begin(), want.tokens[s].end());
    EXPECT_GE(generated.size(), 3u);
    // The caches, each replica's heads assembled, are the unsplit step's.
    testing::expect_near_dict(got.cache, want.cache, "caches", kRel);
  }
}

// The collectives of a step are training's forward pass's: per block one all-reduce joins the
// attention's heads and one the MLP's hidden features; nothing else (the embedding, norms and
// head are replicated, and each replica's cache stays its own).
TEST(TensorParallelDecode, EachBlockAllReducesTwiceAndNothingElse) {
  const DecoderConfig c = llama();
  ArrayDict p;
  decoder_params(p, c, 2);
  auto tp = tp_step(c, model_axis());
  const ArrayDict tpp = tp_decoder_params(p, c);
  const Array ids = Array::full(DType::i32, {kBatch, 1}, 3.0);
  auto [logits, cache] = tp(tpp, ids, Array::scalar<int32_t>(0), decoder_cache(c, kBatch));  // compiles
  const int64_t before = metrics().allreduce_calls.load();
  auto [logits1, cache1] = tp(tpp, ids, Array::scalar<int32_t>(1), cache);
  EXPECT_EQ(metrics().allreduce_calls.load() - before, 2 * c.layers);
}

// A cache that holds every kv head on each replica (not split by tp_decoder_cache_spec) is a
// clear error naming the layer and the expected shape.
TEST(TensorParallelDecode, AnUnsplitCacheIsAnErrorNamingTheStep) {
  const DecoderConfig c = gpt();
  ArrayDict p;
  decoder_params(p, c, 1);
  auto sm = shard_map(
      [c](const TensorDict& q, const Tensor& ids, const Tensor& pos, const TensorDict& kv) {
        return tp_decoder_step(q, c, ids, pos, kv, "model").logits;
      },
      model_axis(), {tp_decoder_spec(c, "model"), {}, {}, {}}, {{}});
  try {
    sm(tp_decoder_params(p, c), Array::full(DType::i32, {kBatch, 1}, 1.0), Array::scalar<int32_t>(0),
       decoder_cache(c, kBatch));
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    const std::string w = e.what();
    for (const char* part : {"tp_attention_step", "f32[2,2,-1,4]", "axis 'model'", "got f32[2,4,12,4]"})
      EXPECT_NE(w.find(part), std::string::npos) << part << " in: " << w;
  }
}

}  // namespace
}  // namespace fjit
