// What the files of core/hf share and users do not need: config.json <-> DecoderConfig
// (hf_config.cc) and the tensor name and layout maps (hf_names.cc). No JSON in here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/hf/hf_checkpoint.h"

namespace fjit::hf::detail {

struct ParsedConfig {
  Architecture architecture;
  DecoderConfig config;
};
// config.json's text -> the architecture and the decoder computing it. `path` names the file
// in errors (std::runtime_error "<path>: ...", naming the field).
ParsedConfig parse_config(const std::string& path, const std::string& text);
// The config.json text of a decoder (std::invalid_argument when it is neither GPT-2 nor
// Llama); `dtype` is the parameters' ("float32", "bfloat16", "float16").
std::string config_json_for(Architecture a, const DecoderConfig& c, const std::string& dtype);
// The architecture a decoder's options make, or std::invalid_argument naming the misfit.
Architecture architecture_of(const DecoderConfig& c);
// The fields of two configs that HF's config.json decides, with the first difference named
// ("" when equal).
std::string config_difference(const DecoderConfig& a, const DecoderConfig& b);

// One fjit parameter and the HF tensors it is made of.
struct Part {
  std::string name;  // HF name without the prefix
  Shape shape;       // as HF stores it
};
struct Mapping {
  std::string fjit;  // fjit name
  Shape shape;       // fjit's shape
  // One part, or several concatenated along fjit's last axis (Llama's q, k, v).
  std::vector<Part> parts;
  bool transpose = false;  // HF stores [out, in] of fjit's 2-D [in, out]
};
// Every parameter of the decoder in decoder_params' order.
std::vector<Mapping> mappings(Architecture a, const DecoderConfig& c);
// The prefix HF's causal-LM class writes ("transformer." / "model."), and whether `name`
// (without any prefix) is a buffer or tied head that readers ignore.
std::string model_prefix(Architecture a);
bool ignored_tensor(Architecture a, const DecoderConfig& c, const std::string& name);

// fjit array <-> HF parts (host byte copies; dtypes kept). from_parts checks nothing: the
// caller has matched shapes and dtypes.
Array from_parts(const Mapping& m, const std::vector<Array>& parts);
std::vector<Array> to_parts(const Mapping& m, const Array& a);

// A LoRA entry of a fjit dict: "<layer>/lora_a", "<layer>/lora_b", "<layer>/lora_scale"
// (core/nn/lora.h's names).
bool is_lora_name(const std::string& name);

const char* hf_dtype_name(DType t);  // "float32", ...

}  // namespace fjit::hf::detail
