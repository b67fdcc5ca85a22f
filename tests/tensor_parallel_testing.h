// What the tensor-parallel tests share: f32 test arrays and their comparison, and the block
// that shard_map_test and mesh_mpi_test train: the shard_map specs of the split layers'
// parameters, the block built from them (as core/nn/transformer.h's, layer norm and GELU MLP),
// and its SGD step on a data x model grid; the language model's SGD step by data parallelism
// and on a data x model grid (core/nn/tensor_parallel_decoder.h), and its AdamW step on the
// grid (parallel/train/tensor_parallel_update.h) as the LM's own step (parallel/lm/lm_step.h)
// configures it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "fjit.h"
#include "parallel/lm/lm_step.h"

namespace fjit::testing {

// The default (GPT-style) decoder configuration, tiny: 2 layers, d 16, 4 heads, vocab 32.
inline DecoderConfig tiny_gpt(int64_t context = 8) {
  DecoderConfig c;
  c.vocab = 32;
  c.context = context;
  c.dim = 16;
  c.layers = 2;
  c.heads = 4;
  return c;
}

// Llama's style of it: rotary, RMS norm, SwiGLU, no attention bias, untied head, grouped-query.
inline DecoderConfig tiny_llama(int64_t context = 8) {
  DecoderConfig c = tiny_gpt(context);
  c.rotary = true;
  c.norm = TransformerBlockOptions::Norm::kRmsNorm;
  c.mlp = TransformerBlockOptions::Mlp::kSwiglu;
  c.mlp_hidden = 24;
  c.attention_bias = false;
  c.tied_embeddings = false;
  c.kv_heads = 2;
  c.rope_theta = 500.0;
  return c;
}

// Uniform in [-1, 1) from a splitmix64 stream.
inline Array random(const Shape& s, uint64_t seed) {
  Array a(DType::f32, s);
  uint64_t z = seed * 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < a.size(); ++i) {
    z += 0x9e3779b97f4a7c15ull;
    uint64_t v = z;
    v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
    v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
    v ^= v >> 31;
    a.data<float>()[i] = static_cast<float>(static_cast<double>(v >> 11) / 9007199254740992.0 * 2 - 1);
  }
  return a;
}

// max |a - b| / max |b|.
inline double rel_err(const Array& a, const Array& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return 1e9;
  double diff = 0, mag = 1e-30;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    diff = std::max(diff, std::abs(x - y));
    mag = std::max(mag, std::abs(y));
  }
  return diff / mag;
}

// Gradients entry by entry, against the largest magnitude of any entry of the oracle's: an
// entry whose exact gradient is 0 (attention's key bias: softmax ignores a shift shared by
// every key) holds only rounding noise, which a per-entry scale would magnify.
inline void expect_near_dict(const ArrayDict& got, const ArrayDict& want, const std::string& what, double rel) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-30;
  for (const auto& kv : want)
    for (int64_t i = 0; i < kv.second.size(); ++i) scale = std::max(scale, std::abs(double(kv.second.data<float>()[i])));
  for (const auto& kv : want) {
    const Array& a = got[kv.first];
    ASSERT_EQ(a.shape(), kv.second.shape()) << what << ": " << kv.first;
    double diff = 0;
    for (int64_t i = 0; i < a.size(); ++i)
      diff = std::max(diff, std::abs(double(a.data<float>()[i]) - kv.second.data<float>()[i]));
    EXPECT_LE(diff, rel * scale) << what << ": " << kv.first;
  }
}

// gelu_mlp's parameters split over "model" (core/nn/tensor_parallel.h).
inline ShardSpec tp_mlp_spec(const std::string& n) {
  return ShardSpec::dict({{n + "/fc/w", {"", "model"}}, {n + "/fc/b", {"model"}}, {n + "/proj/w", {"model", ""}}});
}
// tp_attention's parameters split over "model".
inline ShardSpec tp_attention_spec(const std::string& n) {
  return ShardSpec::dict({{n + "/q/w", {"", "model"}}, {n + "/k/w", {"", "model"}}, {n + "/v/w", {"", "model"}},
                          {n + "/q/b", {"model"}}, {n + "/k/b", {"model"}}, {n + "/v/b", {"model"}},
                          {n + "/out/w", {"model", ""}}});
}

// transformer_block(p, "blk", x, ...) from the split layers.
inline Tensor tp_block(const TensorDict& p, const Tensor& x, const MultiHeadAttentionOptions& o) {
  Tensor h = x + tp_attention(p, "blk/attn", layer_norm(p, "blk/norm1", x), "model", o);
  return h + tp_gelu_mlp(p, "blk/mlp", layer_norm(p, "blk/norm2", h), "model");
}

inline Tensor block_mse(const Tensor& y, const Tensor& t) { return mean((y - t) * (y - t)); }

// One SGD step of block_mse(tp_block(params, x), target) on `mesh` (axes "data", "model"):
// (params, x, target) -> (new params, the batch's loss), x and target split over "data".
inline auto tp_block_step(const Mesh& mesh, const MultiHeadAttentionOptions& o, double lr) {
  ShardSpec spec = tp_attention_spec("blk/attn");
  for (const auto& kv : tp_mlp_spec("blk/mlp").entries) spec.entries.insert(kv);
  return shard_map([o, lr](const TensorDict& q, const Tensor& xb, const Tensor& tb) {
    auto [loss, g] = value_and_grad([&](const TensorDict& w, const Tensor& xx, const Tensor& tt) {
      return block_mse(tp_block(w, xx, o), tt);
    })(q, xb, tb);
    g = pmean(g, "data");
    TensorDict next;
    for (const auto& kv : q) next.set(kv.first, kv.second - g[kv.first] * lr);
    return std::tuple{next, pmean(loss, "data")};
  }, mesh, {spec, {"data"}, {"data"}}, {spec, {}});
}

inline Tensor lm_loss(const Tensor& logits, const Tensor& labels) { return mean(softmax_cross_entropy(logits, labels)); }

inline TensorDict sgd(const TensorDict& q, const TensorDict& g, double lr) {
  TensorDict next;
  for (const auto& kv : q) next.set(kv.first, kv.second - g[kv.first] * lr);
  return next;
}

// One SGD step of the language model c by data parallelism over `mesh` (one axis, "batch"):
// (decoder_params' dict, ids, labels) -> (new params, the batch's mean loss).
inline auto lm_data_parallel_step(const Mesh& mesh, const DecoderConfig& c, double lr) {
  return pmap(mesh, "batch", [c, lr](const TensorDict& q, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad([&](const TensorDict& w) { return lm_loss(decoder_logits(w, c, x), y); })(q);
    return std::tuple{sgd(q, pmean(g, "batch"), lr), pmean(loss, "batch")};
  });
}

// The same step on a "data" x "model" mesh: sequences split over "data", every block over
// "model"; takes and returns tp_decoder_params' dict.
inline auto lm_tensor_parallel_step(const Mesh& mesh, const DecoderConfig& c, double lr) {
  const ShardSpec spec = tp_decoder_spec(c, "model");
  return shard_map([c, lr](const TensorDict& q, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad([&](const TensorDict& w) { return lm_loss(tp_decoder_logits(w, c, x, "model"), y); })(q);
    return std::tuple{sgd(q, pmean(g, "data"), lr), pmean(loss, "data")};
  }, mesh, {spec, {"data"}, {"data"}}, {spec, {}});
}

// fn's step (AdamW at fn.schedule, fn.groups, clipping to fn.clip_grad_norm) on a "data" x
// "model" mesh, every block split over "model": (tp_decoder_params' dict, its AdamW state,
// ids, labels, step) -> (params', state', mean loss, global norm before clipping), the state
// split as the parameters (tp_optimizer_state_spec).
inline auto lm_tensor_parallel_adamw_step(const Mesh& mesh, const lm::LmStepFn& fn) {
  const ShardSpec spec = tp_decoder_spec(fn.model, "model"), state = tp_optimizer_state_spec(spec);
  return shard_map(
      [fn, spec](const TensorDict& q, const TensorDict& s, const Tensor& x, const Tensor& y, const Tensor& step) {
        auto [loss, g] =
            value_and_grad([&](const TensorDict& w) { return lm_loss(tp_decoder_logits(w, fn.model, x, "model"), y); })(q);
        auto [q2, s2, norm] =
            training::tp_adamw_update_of_mean(q, pmean(g, "data"), s, fn.optimizer, fn.schedule, step,
                                              fn.max_grad_norm, fn.clip_grad_norm, spec, "model", fn.groups);
        return std::tuple{q2, s2, pmean(loss, "data"), norm};
      },
      mesh, {spec, state, {"data"}, {"data"}, {}}, {spec, state, {}, {}});
}

// Token ids i32 [b, t] in [0, vocab) from a linear congruential stream.
inline Array token_ids(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  Array a(DType::i32, {b, t});
  uint64_t z = seed;
  for (int64_t i = 0; i < a.size(); ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    a.data<int32_t>()[i] = static_cast<int32_t>((z >> 33) % static_cast<uint64_t>(vocab));
  }
  return a;
}

}  // namespace fjit::testing
