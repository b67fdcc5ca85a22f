// shard_map specs (parallel/shard_map.h) of the tensor-parallel layers' parameters
// (core/nn/tensor_parallel.h, core/nn/tensor_parallel_decoder.h): the weights split over
// `axis` as those layers expect, every other entry replicated; and of the dicts that follow
// the parameters' split: the optimizer state, the decode step's KV cache.
#pragma once

#include <string>

#include "core/nn/decoder.h"
#include "parallel/shard_map.h"

namespace fjit {

// Adds the split entries of tp_attention's parameters under `name` to `spec` (biases only
// with `bias`).
void tp_attention_spec(ShardSpec& spec, const std::string& name, const std::string& axis, bool bias = true);
// Adds tp_gelu_mlp's ("fc/w", "fc/b", "proj/w") or, with `swiglu`, tp_swiglu_mlp's ("gate/w",
// "up/w", "down/w") split entries under `name`.
void tp_mlp_spec(ShardSpec& spec, const std::string& name, const std::string& axis, bool swiglu = false);
// The spec of tp_decoder_params' dict for tp_decoder_logits: every block's attention and MLP
// split over `axis`; tables, norms and the head replicated.
ShardSpec tp_decoder_spec(const DecoderConfig& c, const std::string& axis);

// The spec of an optimizer state (core/lib/optimizer.h: "m.<name>", "v.<name>", "step") for
// parameters split by `params`: each moment split as its parameter, "step" replicated. So
// each replica keeps the state of the parameter blocks it holds.
ShardSpec tp_optimizer_state_spec(const ShardSpec& params);
// The spec of decoder_cache's dict for tp_decoder_step: every layer's "k<i>", "v<i>"
// [B, KV, context, dh] split over `axis` by kv heads (dimension 1).
ShardSpec tp_decoder_cache_spec(const DecoderConfig& c, const std::string& axis);

}  // namespace fjit
