// LoRA (low-rank adaptation, Hu et al. 2021) of the linear layers, as Hugging Face's PEFT
// defines it: a frozen weight w [in, out] gains a trainable low-rank update,
//   y = x @ w (+ b) + ((x @ A) @ B) * s,   A [in, r], B [r, out], s = alpha / r,
// with B zero at the start, so the adapted model begins as the base model.
//
// Parameter names under a linear layer `<layer>` (whose weight is "<layer>/w"):
//   "<layer>/lora_a" [in, r]    f32, drawn as PEFT draws lora_A: kaiming_uniform(a = sqrt(5)),
//                               which for lora_A's fan-in `in` is U(-1/sqrt(in), 1/sqrt(in))
//   "<layer>/lora_b" [r, out]   f32 zeros
//   "<layer>/lora_scale" []     f32 scalar alpha / r: data, not a constant of the trace, so a
//                               new alpha needs no recompile, and it exports back to PEFT's
//                               lora_alpha = scale * r
// linear() (core/nn/linear.h) adds the adapter wherever it finds "<layer>/lora_a", so every
// layer built on linear (attention's qkv and out, both MLPs, an untied decoder head) is
// adaptable. The adapter is f32 whatever the base dtype (bf16 base weights stay frozen and
// storage-only; linear casts the adapter to the activations' dtype).
//
// Training only the adapter: differentiate with respect to lora_adapter(params) less the
// scales (or a trainable set "*/lora_a", "*/lora_b"), the base weights passed as another
// argument; lora_scale is a hyper-parameter, not meant to be trained.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/array.h"
#include "core/trace/dict.h"

namespace fjit {

struct LoraOptions {
  int64_t rank = 8;   // r
  double alpha = 16;  // the scale is alpha / r
  // Patterns over a linear layer's name (the part before "/w", e.g. "block0/attn/qkv"),
  // matched by fjit::name_matches (core/base/name_pattern.h): "attn/qkv", "mlp/*", "*".
  std::vector<std::string> targets;
  uint64_t seed = 0;  // lora_a of each layer is drawn from (seed, the layer's name)
};

// Adds an adapter (above) to every linear layer of `params` that a target selects: a layer is
// a rank-2 "<layer>/w". Returns the adapted layers' names, in the order of params. Throws
// std::invalid_argument (changing nothing) when rank < 1, when no layer matches (the message
// lists the linear layers there are), or when a selected layer already has an adapter.
std::vector<std::string> add_lora(ArrayDict& params, const LoraOptions& o);

// Folds every adapter into its weight: w = w + s * A @ B, computed in double on the host and
// stored in w's dtype (bf16 rounds once); then removes the adapter's three entries. Throws
// std::invalid_argument (changing nothing) for an incomplete adapter or one whose shapes do
// not fit its weight.
void merge_lora(ArrayDict& params);

// True for "<layer>/lora_a", "<layer>/lora_b" and "<layer>/lora_scale".
bool is_lora_param(const std::string& name);
// The adapter entries of params (is_lora_param), in their order.
ArrayDict lora_adapter(const ArrayDict& params);

}  // namespace fjit
