// The examples' MLP classifier of Fashion-MNIST (784-512-256-10, ReLU) as plain functions, for
// the tests and benchmarks that build their own steps around it. The trainer's version of it
// is lib/models.h's classifier(ModelSpec{}).
#pragma once

#include <cstdint>
#include <vector>

#include "fjit.h"
#include "lib/models.h"

namespace fjit::examples {

// Layer sizes of the Fashion-MNIST classifier: 784-512-256-10.
inline const std::vector<int64_t> kFashionMnistLayers = {784, 512, 256, 10};

// Parameters "w1", "b1", ..., "wL", "bL" for layer sizes {in, h1, ..., out}: He-normal
// weights, zero biases, drawn from `seed` (mlp_params, core/lib/initializers.h).
ArrayDict init_mlp(const std::vector<int64_t>& sizes, uint64_t seed);

// Logits [batch, classes] of x [batch, in]: ReLU after every layer but the last (mlp,
// core/nn/linear.h).
Tensor mlp_logits(const Params& p, const Tensor& x);

}  // namespace fjit::examples
