// The transformer's feed-forward layers over the last axis: GELU MLP (GPT-2, ViT) and SwiGLU
// MLP (Llama). x [..., D] -> [..., D].
//
// Parameter names under `name`:
//   gelu_mlp    "<name>/fc/w" [D, F], "<name>/fc/b" [F], "<name>/proj/w" [F, D], "<name>/proj/b" [D]
//   swiglu_mlp  "<name>/gate/w" [D, F], "<name>/up/w" [D, F], "<name>/down/w" [F, D] (no biases)
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/array.h"
#include "core/lib/initializers.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

// proj(gelu(fc(x))), with the exact (erf) GELU.
Tensor gelu_mlp(const Params& p, const std::string& name, const Tensor& x, Loc loc = Loc::current());
// With `tanh_approximation`, GELU by its tanh approximation (core/nn/activations.h's gelu with
// approximate = true; GPT-2's "gelu_new"); false is the exact GELU above.
Tensor gelu_mlp(const Params& p, const std::string& name, const Tensor& x, bool tanh_approximation,
                Loc loc = Loc::current());
// fc drawn with `init` from `seed`, proj from `seed + 1`, zero biases.
void gelu_mlp_params(ArrayDict& d, const std::string& name, int64_t dim, int64_t hidden,
                     uint64_t seed, Init init = Init::glorot_uniform, DType dtype = DType::f32);

// down(silu(gate(x)) * up(x)).
Tensor swiglu_mlp(const Params& p, const std::string& name, const Tensor& x, Loc loc = Loc::current());
// gate drawn with `init` from `seed`, up from `seed + 1`, down from `seed + 2`.
void swiglu_mlp_params(ArrayDict& d, const std::string& name, int64_t dim, int64_t hidden,
                       uint64_t seed, Init init = Init::glorot_uniform, DType dtype = DType::f32);

}  // namespace fjit
