// The tensor-parallel layers' specs (see parallel/tensor_parallel_spec.h).
#include "parallel/tensor_parallel_spec.h"

#include <fmt/format.h>

namespace fjit {

void tp_attention_spec(ShardSpec& spec, const std::string& name, const std::string& axis, bool bias) {
  for (const char* part : {"/q", "/k", "/v"}) {
    spec.entries[name + part + "/w"] = {"", axis};
    if (bias) spec.entries[name + part + "/b"] = {axis};
  }
  spec.entries[name + "/out/w"] = {axis, ""};
}

void tp_mlp_spec(ShardSpec& spec, const std::string& name, const std::string& axis, bool swiglu) {
  if (swiglu) {
    spec.entries[name + "/gate/w"] = {"", axis};
    spec.entries[name + "/up/w"] = {"", axis};
    spec.entries[name + "/down/w"] = {axis, ""};
  } else {
    spec.entries[name + "/fc/w"] = {"", axis};
    spec.entries[name + "/fc/b"] = {axis};
    spec.entries[name + "/proj/w"] = {axis, ""};
  }
}

ShardSpec tp_decoder_spec(const DecoderConfig& c, const std::string& axis) {
  ShardSpec spec;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string block = fmt::format("block{}", i);
    tp_attention_spec(spec, block + "/attn", axis, c.attention_bias);
    tp_mlp_spec(spec, block + "/mlp", axis, c.mlp == TransformerBlockOptions::Mlp::kSwiglu);
  }
  return spec;
}

ShardSpec tp_optimizer_state_spec(const ShardSpec& params) {
  ShardSpec spec;
  for (const auto& [name, parts] : params.entries) {
    spec.entries["m." + name] = parts;
    spec.entries["v." + name] = parts;
  }
  return spec;
}

ShardSpec tp_decoder_cache_spec(const DecoderConfig& c, const std::string& axis) {
  ShardSpec spec;
  for (int64_t i = 0; i < c.layers; ++i) {
    spec.entries[fmt::format("k{}", i)] = {"", axis};
    spec.entries[fmt::format("v{}", i)] = {"", axis};
  }
  return spec;
}

}  // namespace fjit
