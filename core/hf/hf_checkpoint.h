// Hugging Face checkpoints of GPT-2 and Llama models in and out: a directory holding
// config.json and model.safetensors (or the shards model.safetensors.index.json names), read
// into the fjit decoder that computes the same function (core/nn/decoder.h), and written back in
// the layout transformers' from_pretrained reads; LoRA adapters written in PEFT's layout.
//
// Names and layouts (HF name -> fjit name; "T": stored transposed, nn.Linear's [out, in]
// against fjit's [in, out]):
//   GPT-2 ("transformer." prefix optional on reading, written with it):
//     wte -> tok/table, wpe -> pos/table, h.<i>.ln_1 -> block<i>/norm1/{g,b},
//     h.<i>.attn.c_attn -> block<i>/attn/qkv/{w,b}, h.<i>.attn.c_proj -> attn/out,
//     h.<i>.ln_2 -> norm2, h.<i>.mlp.c_fc -> mlp/fc, h.<i>.mlp.c_proj -> mlp/proj,
//     ln_f -> norm/{g,b}; Conv1D weights are [in, out] as fjit's (no transpose).
//     lm_head.weight (T) -> head/w only when the embeddings are untied; when tied it is not
//     written, and on reading it and the attention buffers (attn.bias, attn.masked_bias) are
//     ignored.
//   Llama ("model." prefix optional on reading, written with it):
//     embed_tokens -> tok/table, layers.<i>.input_layernorm -> block<i>/norm1/g,
//     self_attn.{q,k,v}_proj (T, concatenated along fjit's columns: all query heads, then the
//     key heads, then the value heads) -> attn/qkv/w (and qkv/b with attention_bias),
//     o_proj (T) -> attn/out/w (and out/b), post_attention_layernorm -> norm2/g,
//     mlp.{gate,up,down}_proj (T) -> mlp/{gate,up,down}/w, norm -> norm/g,
//     lm_head.weight (T) -> head/w unless tied. rotary_emb.inv_freq buffers are ignored.
// Tensors keep the dtype they are stored in (f32, bf16 or f16; any other is refused).
//
// Errors: std::runtime_error whose message starts with the file's path and names the tensor
// or config field: a missing, unexpected, misshapen or wrongly typed tensor; a shard the index
// names that is missing; a malformed config.json; an architecture or option fjit does not
// compute (named). Loading never returns a partly loaded model.
#pragma once

#include <string>

#include "core/io/checkpoint.h"
#include "core/ir/array.h"
#include "core/nn/decoder.h"
#include "core/trace/dict.h"

namespace fjit::hf {

enum class Architecture { kGpt2, kLlama };

struct HfModel {
  Architecture architecture = Architecture::kGpt2;
  DecoderConfig config;     // the decoder that computes this model
  ArrayDict params;         // fjit names (decoder_params' order), dtypes as stored
  std::string config_json;  // the config.json text as read (kept for export)
};

// Reads <dir>/config.json and <dir>/model.safetensors, or the shards listed by
// <dir>/model.safetensors.index.json.
HfModel load_hf_model(const std::string& dir);

// The HF model of a fjit decoder trained from scratch: GPT-2 when it has learned positions,
// layer norm and the GELU MLP; Llama when rotary, RMS norm and SwiGLU; otherwise
// std::invalid_argument naming what fits neither. `params` must be the decoder's (names and
// shapes are checked); config_json is generated and `config` is what loading it gives back
// (sizes made explicit, e.g. mlp_hidden 0 becomes 4 * dim), with training-only fields
// (remat) kept.
HfModel hf_model_for(const DecoderConfig& config, ArrayDict params);

// Writes <dir>/config.json (model.config_json when set, which must describe model.config;
// else generated) and <dir>/model.safetensors (metadata "format": "pt", HF names and layouts,
// tied embeddings not duplicated), each file replaced atomically; creates <dir>. Refuses
// (std::invalid_argument) params holding LoRA entries: merge them first.
void save_hf_model(const std::string& dir, const HfModel& model);

// The adapters alone, in PEFT's layout: <dir>/adapter_config.json and
// <dir>/adapter_model.safetensors ("base_model.model.<hf module>.lora_A.weight" [r, in],
// ".lora_B.weight" [out, r]), from the "<layer>/lora_a" [in, r], "<layer>/lora_b" [r, out] and
// "<layer>/lora_scale" entries of model.params; `base_model` goes into base_model_name_or_path.
// Llama's fused qkv adapter becomes q_proj, k_proj and v_proj adapters sharing lora_A, each
// with its slice of lora_B. std::invalid_argument when there is no adapter or one sits on a
// layer HF has no module for.
void save_peft_adapter(const std::string& dir, const HfModel& model, const std::string& base_model);

// model.params (or any dict with the same names, e.g. their gradients) under HF names and
// layouts, in the order save_hf_model writes them (GPT2LMHeadModel's / LlamaForCausalLM's
// names). Requires exactly the decoder's parameters.
io::NamedArrays hf_tensors(const HfModel& model, const ArrayDict& params);

// "gpt2 (GPT-2): 2 layers, d 32, ... ; 12345 parameters, f32".
std::string describe(const HfModel& model);
const char* architecture_name(Architecture a);

}  // namespace fjit::hf
