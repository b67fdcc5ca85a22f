// The tensor-parallel transformer block that shard_map_test and mesh_mpi_test train: the
// shard_map specs of the split layers' parameters, the block built from them (as
// core/nn/transformer.h's, layer norm and GELU MLP), and its SGD step on a data x model grid.
#pragma once

#include <string>
#include <tuple>

#include "fjit.h"

namespace fjit::testing {

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

}  // namespace fjit::testing
