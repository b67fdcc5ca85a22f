// Text generation from a decoder (core/nn/decoder.h) with a KV cache.
//
// One compiled step of fixed shape — (params, caches, token [1, 1], position, seed) -> (next
// token, caches') — runs every token: the prompt's tokens one at a time (their samples
// ignored), then each new token. The position is a traced i32 scalar and the caches have the
// model's whole context, so the step is traced and compiled once, whatever the prompt or
// the length (Generated::compiles says so).
//
// Sampling: logits / temperature, restricted to the top_k likeliest tokens when top_k > 0,
// then a categorical draw from a key folded from (seed, position): the same seed gives the
// same text. temperature 0 is greedy (argmax).
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/array.h"
#include "core/nn/decoder.h"

namespace fjit::lm {

struct GenerateOptions {
  int64_t new_tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 0;
};

struct Generated {
  std::string text;             // the new tokens only, decoded
  int64_t prompt_tokens = 0;    // of the prompt, after keeping what fits the context
  int64_t new_tokens = 0;
  double seconds = 0;           // from the first new token on (new_tokens - 1 steps)
  int64_t compiles = 0;         // plans compiled for the whole generation
};

// Throws std::invalid_argument when the prompt is empty. A prompt longer than the context
// keeps its last tokens; generation stops when the context is full.
Generated generate(const ArrayDict& params, const DecoderConfig& model, const std::string& prompt,
                   const GenerateOptions& options);

}  // namespace fjit::lm
