// Activations built from ops: GELU, SiLU and the softmax family. (relu, tanh, sigmoid and the
// other one-op activations are ops of the table, in core/trace/ops.h; so is the exact GELU.)
#pragma once

#include "core/trace/ops.h"

namespace fjit {

// GELU: x * Phi(x) with the exact normal CDF (erf), the op gelu (gelu_exact, whose VJP is one
// op too), or its tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) when
// `approximate`, a composite.
Tensor gelu(const Tensor& x, bool approximate = false, Loc loc = Loc::current());

// SiLU (swish): x * sigmoid(x), the gate of Llama's SwiGLU MLP.
Tensor silu(const Tensor& x, Loc loc = Loc::current());

// Over the last axis by default; numerically stable (the maximum is subtracted first).
Tensor log_softmax(const Tensor& logits, int64_t axis = -1, Loc loc = Loc::current());
Tensor softmax(const Tensor& logits, int64_t axis = -1, Loc loc = Loc::current());

}  // namespace fjit
