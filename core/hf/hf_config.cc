// config.json <-> DecoderConfig for GPT-2 and Llama (core/hf/hf_internal.h). Missing optional
// fields take transformers' defaults (GPT2Config, LlamaConfig); the sizes are required. Every
// field that changes the function fjit would have to compute differently is refused by name.
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/hf/hf_internal.h"

namespace fjit::hf::detail {
namespace {

using Json = nlohmann::ordered_json;
using Norm = TransformerBlockOptions::Norm;
using Mlp = TransformerBlockOptions::Mlp;

struct Reader {
  const std::string& path;
  const Json& j;

  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(path + ": " + what); }
  const Json* find(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t size(const char* key) const {
    const Json* v = find(key);
    if (!v) fail(fmt::format("field \"{}\" is missing", key));
    if (!v->is_number_integer() || v->get<int64_t>() < 1)
      fail(fmt::format("field \"{}\" must be a positive integer, found {}", key, v->dump()));
    return v->get<int64_t>();
  }
  int64_t size_or(const char* key, int64_t fallback) const { return find(key) ? size(key) : fallback; }
  double number_or(const char* key, double fallback) const {
    const Json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number() || !(v->get<double>() >= 0))
      fail(fmt::format("field \"{}\" must be a non-negative number, found {}", key, v->dump()));
    return v->get<double>();
  }
  bool flag_or(const char* key, bool fallback) const {
    const Json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(fmt::format("field \"{}\" must be true or false, found {}", key, v->dump()));
    return v->get<bool>();
  }
  std::string text_or(const char* key, const std::string& fallback) const {
    const Json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(fmt::format("field \"{}\" must be a string, found {}", key, v->dump()));
    return v->get<std::string>();
  }
  // A field whose only value fjit computes is `supported`.
  void require(const char* key, bool fallback, bool supported, const char* why) const {
    if (flag_or(key, fallback) != supported)
      fail(fmt::format("field \"{}\": {} is not supported (fjit computes only {}: {})", key,
                       !supported, supported, why));
  }
};

DecoderConfig gpt2_config(const Reader& r) {
  DecoderConfig c;
  c.vocab = r.size("vocab_size");
  c.context = r.find("n_positions") ? r.size("n_positions") : r.size("max_position_embeddings");
  c.dim = r.find("n_embd") ? r.size("n_embd") : r.size("hidden_size");
  c.layers = r.find("n_layer") ? r.size("n_layer") : r.size("num_hidden_layers");
  c.heads = r.find("n_head") ? r.size("n_head") : r.size("num_attention_heads");
  c.mlp_hidden = r.size_or("n_inner", 4 * c.dim);
  const std::string act = r.text_or("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") c.gelu_tanh = true;
  else if (act == "gelu") c.gelu_tanh = false;
  else
    r.fail(fmt::format("field \"activation_function\": \"{}\" is not supported (fjit computes "
                       "\"gelu\", \"gelu_new\" and \"gelu_pytorch_tanh\")", act));
  c.norm_eps = r.number_or("layer_norm_epsilon", 1e-5);
  c.tied_embeddings = r.flag_or("tie_word_embeddings", true);
  r.require("scale_attn_weights", true, true, "scores divided by sqrt(head size)");
  r.require("scale_attn_by_inverse_layer_idx", false, false, "no per-layer score scaling");
  r.require("add_cross_attention", false, false, "a decoder without cross-attention");
  c.kv_heads = c.heads;
  c.attention_bias = true;
  c.rotary = false;
  c.norm = Norm::kLayerNorm;
  c.mlp = Mlp::kGelu;
  return c;
}

// transformers 5 keeps the rotary settings in rope_parameters; 4 in rope_theta and rope_scaling.
double llama_rope_theta(const Reader& r) {
  double theta = r.number_or("rope_theta", 10000.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const Json* v = r.find(key);
    if (!v) continue;
    if (!v->is_object()) r.fail(fmt::format("field \"{}\" must be an object, found {}", key, v->dump()));
    Reader sub{r.path, *v};
    const std::string type = sub.text_or("rope_type", sub.text_or("type", "default"));
    if (type != "default")
      r.fail(fmt::format("field \"{}\": rope type \"{}\" is not supported (fjit computes \"default\" "
                         "rotary positions only)", key, type));
    theta = sub.number_or("rope_theta", theta);
  }
  if (!(theta > 0)) r.fail("field \"rope_theta\" must be positive");
  return theta;
}

DecoderConfig llama_config(const Reader& r) {
  DecoderConfig c;
  c.vocab = r.size("vocab_size");
  c.context = r.size("max_position_embeddings");
  c.dim = r.size("hidden_size");
  c.layers = r.size("num_hidden_layers");
  c.heads = r.size("num_attention_heads");
  c.kv_heads = r.size_or("num_key_value_heads", c.heads);
  c.mlp_hidden = r.size("intermediate_size");
  if (c.dim % c.heads != 0)
    r.fail(fmt::format("field \"num_attention_heads\": {} heads do not divide hidden_size {}", c.heads, c.dim));
  if (c.heads % c.kv_heads != 0)
    r.fail(fmt::format("field \"num_key_value_heads\": {} key/value heads do not divide {} heads",
                       c.kv_heads, c.heads));
  if (r.find("head_dim") && r.size("head_dim") != c.dim / c.heads)
    r.fail(fmt::format("field \"head_dim\": {} is not supported (fjit computes head_dim = hidden_size / "
                       "num_attention_heads = {})", r.size("head_dim"), c.dim / c.heads));
  const std::string act = r.text_or("hidden_act", "silu");
  if (act != "silu")
    r.fail(fmt::format("field \"hidden_act\": \"{}\" is not supported (fjit computes \"silu\")", act));
  r.require("mlp_bias", false, false, "an MLP without biases");
  c.attention_bias = r.flag_or("attention_bias", false);
  c.norm_eps = r.number_or("rms_norm_eps", 1e-6);
  c.rope_theta = llama_rope_theta(r);
  c.tied_embeddings = r.flag_or("tie_word_embeddings", false);
  c.rotary = true;
  c.norm = Norm::kRmsNorm;
  c.mlp = Mlp::kSwiglu;
  return c;
}

}  // namespace

ParsedConfig parse_config(const std::string& path, const std::string& text) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    throw std::runtime_error(path + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) throw std::runtime_error(path + ": malformed config: expected a JSON object");
  Reader r{path, j};
  const std::string type = r.text_or("model_type", "");
  ParsedConfig out;
  if (type == "gpt2") out = {Architecture::kGpt2, gpt2_config(r)};
  else if (type == "llama") out = {Architecture::kLlama, llama_config(r)};
  else if (type.empty()) r.fail("field \"model_type\" is missing");
  else r.fail(fmt::format("field \"model_type\": architecture \"{}\" is not supported (fjit reads \"gpt2\" and \"llama\")", type));
  try {
    validate(out.config);
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  return out;
}

Architecture architecture_of(const DecoderConfig& c) {
  const bool gpt2 = !c.rotary && c.norm == Norm::kLayerNorm && c.mlp == Mlp::kGelu;
  const bool llama = c.rotary && c.norm == Norm::kRmsNorm && c.mlp == Mlp::kSwiglu;
  if (gpt2) {
    if (c.kv_heads != 0 && c.kv_heads != c.heads)
      throw std::invalid_argument(fmt::format("hf: GPT-2 has no grouped-query attention ({} kv heads, {} heads)",
                                              c.kv_heads, c.heads));
    if (!c.attention_bias) throw std::invalid_argument("hf: GPT-2 attention has biases (attention_bias false)");
    return Architecture::kGpt2;
  }
  if (llama) return Architecture::kLlama;
  throw std::invalid_argument(fmt::format(
      "hf: the decoder ({}) is neither GPT-2 (learned positions, layer norm, GELU MLP) nor Llama "
      "(rotary, RMS norm, SwiGLU)", c.describe()));
}

std::string config_json_for(Architecture a, const DecoderConfig& c, const std::string& dtype) {
  validate(c);
  if (architecture_of(c) != a) throw std::invalid_argument("hf: the decoder's options do not make that architecture");
  const int64_t hidden = c.mlp_hidden > 0 ? c.mlp_hidden : 4 * c.dim;
  const int64_t kv = c.kv_heads > 0 ? c.kv_heads : c.heads;
  Json j;
  if (a == Architecture::kGpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab;
    j["n_positions"] = c.context;
    j["n_embd"] = c.dim;
    j["n_layer"] = c.layers;
    j["n_head"] = c.heads;
    j["n_inner"] = hidden;
    j["activation_function"] = c.gelu_tanh ? "gelu_new" : "gelu";
    j["layer_norm_epsilon"] = c.norm_eps > 0 ? c.norm_eps : 1e-5;
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    j["reorder_and_upcast_attn"] = false;
    j["add_cross_attention"] = false;
    // fjit trains without dropout; a fine-tune from this checkpoint chooses its own.
    for (const char* k : {"attn_pdrop", "embd_pdrop", "resid_pdrop"}) j[k] = 0.0;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["vocab_size"] = c.vocab;
    j["max_position_embeddings"] = c.context;
    j["hidden_size"] = c.dim;
    j["intermediate_size"] = hidden;
    j["num_hidden_layers"] = c.layers;
    j["num_attention_heads"] = c.heads;
    j["num_key_value_heads"] = kv;
    j["head_dim"] = c.dim / c.heads;
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = c.norm_eps > 0 ? c.norm_eps : 1e-6;
    j["rope_parameters"] = {{"rope_theta", c.rope_theta}, {"rope_type", "default"}};
    j["rope_theta"] = c.rope_theta;  // transformers 4 reads it here
    j["attention_bias"] = c.attention_bias;
    j["attention_dropout"] = 0.0;
    j["mlp_bias"] = false;
  }
  // fjit's vocabularies have no special tokens of GPT-2's or Llama's numbering.
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  j["pad_token_id"] = nullptr;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["dtype"] = dtype;
  return j.dump(2) + "\n";
}

std::string config_difference(const DecoderConfig& a, const DecoderConfig& b) {
  auto kv = [](const DecoderConfig& c) { return c.kv_heads > 0 ? c.kv_heads : c.heads; };
  auto hidden = [](const DecoderConfig& c) { return c.mlp_hidden > 0 ? c.mlp_hidden : 4 * c.dim; };
  auto eps = [](const DecoderConfig& c) {
    return c.norm_eps > 0 ? c.norm_eps : (c.norm == Norm::kRmsNorm ? 1e-6 : 1e-5);
  };
  auto field = [](const char* name, auto x, auto y) {
    return x == y ? std::string() : fmt::format("{} {} vs {}", name, x, y);
  };
  for (const std::string& d :
       {field("vocab", a.vocab, b.vocab), field("context", a.context, b.context), field("dim", a.dim, b.dim),
        field("layers", a.layers, b.layers), field("heads", a.heads, b.heads), field("kv_heads", kv(a), kv(b)),
        field("mlp_hidden", hidden(a), hidden(b)), field("attention_bias", a.attention_bias, b.attention_bias),
        field("norm_eps", eps(a), eps(b)), field("gelu_tanh", a.gelu_tanh, b.gelu_tanh),
        field("rotary", a.rotary, b.rotary), field("tied_embeddings", a.tied_embeddings, b.tied_embeddings),
        field("rms norm", a.norm == Norm::kRmsNorm, b.norm == Norm::kRmsNorm),
        field("swiglu", a.mlp == Mlp::kSwiglu, b.mlp == Mlp::kSwiglu),
        a.rotary ? field("rope_theta", a.rope_theta, b.rope_theta) : std::string()})
    if (!d.empty()) return d;
  return "";
}

}  // namespace fjit::hf::detail
