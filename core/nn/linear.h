// The linear (dense) layer and the MLP: matrix products plus biases, nothing of their own.
//
// Parameter names (a layer reads its parameters from a Params dict under a name, as Flax and
// Haiku modules do; nested layers join names with '/'):
//   linear   "<name>/w" [in, out], "<name>/b" [out] (no b without a bias)
//   mlp      "<prefix>w1", "<prefix>b1", ..., "<prefix>wL", "<prefix>bL" (mlp_params' names,
//            core/lib/initializers.h, with an empty prefix)
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/ir/array.h"
#include "core/lib/initializers.h"
#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

// x [..., in] -> x @ w + b, [..., out]. A rank-2 x is one matrix product; any other rank is
// flattened to rows and shaped back.
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
