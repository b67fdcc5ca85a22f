// The linear (dense) layer and the MLP: matrix products plus biases, nothing of their own.
//
// Parameter names (a layer reads its parameters from a Params dict under a name, as Flax and
// Haiku modules do; nested layers join names with '/'):
//   linear   "<name>/w" [in, out], "<name>/b" [out] (no b without a bias)
//            optionally a LoRA adapter (core/nn/lora.h): "<name>/lora_a" [in, r],
//            "<name>/lora_b" [r, out], "<name>/lora_scale" (rank 0)
//   mlp      "<prefix>w1", "<prefix>b1", ..., "<prefix>wL", "<prefix>bL" (mlp_params' names,
//            core/lib/initializers.h, with an empty prefix)
//
// Half-precision parameters: the layers of this folder read every parameter through weight()
// below, so a model whose parameters are stored as bf16 or f16 (storage-only dtypes, which no
// arithmetic op accepts) runs, computing in the dtype of its activations (f32).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/ir/array.h"
#include "core/lib/initializers.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

// p[name] as a layer computes with it: a bf16 or f16 parameter is cast to `compute` (the
// activations' dtype); any other parameter is returned as it is (a dtype mismatch is then the
// consuming op's TraceError). Throws std::out_of_range when p has no `name`, as p[name] does.
Tensor weight(const Params& p, const std::string& name, DType compute, Loc loc = Loc::current());

// x [..., in] -> x @ w + b, [..., out]. A rank-2 x is one matrix product; any other rank is
// flattened to rows and shaped back. When p holds "<name>/lora_a", the LoRA adapter is added:
// + ((x @ lora_a) @ lora_b) * lora_scale, the adapter's entries cast to x's dtype (an f32
// adapter serves an f64 or a bf16-stored layer). A lora_a without lora_b or lora_scale, or of
// shapes that do not fit w, is a TraceError naming the layer.
Tensor linear(const Params& p, const std::string& name, const Tensor& x, Loc loc = Loc::current());
// With `bias` false, x @ w alone: reads "<name>/w" only (Llama's projections).
Tensor linear(const Params& p, const std::string& name, const Tensor& x, bool bias,
              Loc loc = Loc::current());
// Its parameters, added to `d`: w [in, out] drawn with `init` from `seed`, b zeros [out]
// (none when !bias).
void linear_params(ArrayDict& d, const std::string& name, int64_t in, int64_t out, uint64_t seed,
                   Init init = Init::glorot_uniform, DType dtype = DType::f32, bool bias = true);

struct MlpOptions {
  std::string prefix;  // of the parameter names: "" reads "w1", "b1", ...
  // Between layers, not after the last one.
  std::function<Tensor(const Tensor&)> activation = [](const Tensor& h) { return relu(h); };
};

// The multi-layer perceptron: linear layers 1..L (as many as p holds "<prefix>wK"), the
// activation after every layer but the last. x [..., in] -> [..., out]. Initialize with
// mlp_params (core/lib/initializers.h).
Tensor mlp(const Params& p, const Tensor& x, const MlpOptions& options = {},
           Loc loc = Loc::current());

}  // namespace fjit
