// Optimizers as pure traced functions over TensorDicts: the state is an explicit input and
// output of the step, never held by the optimizer object.
//
//   AdamW opt{.lr = 1e-3, .weight_decay = 1e-2};
//   ArrayDict state = opt.init_state(params);                 // host side, before the loop
//   auto step = jit([opt](const Params& p, const Params& s, const Tensor& x, const Tensor& y) {
//     auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
//     auto [p2, s2] = opt.update(p, clip_by_global_norm(g, 1.0), s);
//     return std::tuple{p2, s2, loss};
//   });
//
// State names derive from parameter names: "m.w1" (first moment or momentum buffer), "v.w1"
// (second moment), and "step" (an i32 scalar counting updates, for bias correction). Every
// state tensor has its parameter's dtype and shape. The update reads nothing back to the host,
// so it compiles into the step. Semantics follow PyTorch's torch.optim (documented per
// optimizer); weight decay applies to every parameter given (pass a sub-dict to exclude some).
#pragma once

#include <utility>

#include "core/trace/ops.h"
#include "core/trace/dict.h"

namespace fjit {

// A learning rate (or other hyper-parameter) given as a number baked into the step, or as a
// traced scalar Tensor (an argument of the step, for schedules without recompiling).
class Scalar {
 public:
  Scalar(double v) : value_(v) {}                // NOLINT: implicit on purpose
  Scalar(const Tensor& t) : value_(0), tensor_(t) {}  // NOLINT: implicit on purpose
  bool is_tensor() const { return tensor_.defined(); }
  double value() const { return value_; }
  // As a rank-0 Tensor of `dtype` in the current trace.
  Tensor as(DType dtype, Loc loc = Loc::current()) const;

 private:
  double value_;
  Tensor tensor_;
};

using OptimizerUpdate = std::pair<TensorDict, TensorDict>;  // {new params, new state}

// g <- g + weight_decay * p;  buf <- momentum * buf + g;  g <- nesterov ? g + momentum * buf : buf;
// p <- p - lr * g. (torch.optim.SGD with dampening 0.) State: "m.<name>" when momentum != 0,
// else empty.
struct SGD {
  Scalar lr = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;

  ArrayDict init_state(const ArrayDict& params) const;
  TensorDict init(const TensorDict& params) const;
  OptimizerUpdate update(const TensorDict& params, const TensorDict& grads,
                         const TensorDict& state) const;
};

// t <- step + 1;  m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2;
// p <- p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).   (torch.optim.Adam)
// weight_decay (L2, added to the gradient as in torch.optim.Adam) defaults to 0.
struct Adam {
  Scalar lr = 1e-3;
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;

  ArrayDict init_state(const ArrayDict& params) const;
  TensorDict init(const TensorDict& params) const;
  OptimizerUpdate update(const TensorDict& params, const TensorDict& grads,
                         const TensorDict& state) const;
};

// Adam with decoupled weight decay: p <- p (1 - lr * weight_decay) before the Adam step.
// (torch.optim.AdamW; its default weight_decay is 1e-2.)
struct AdamW {
  Scalar lr = 1e-3;
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;

  ArrayDict init_state(const ArrayDict& params) const;
  TensorDict init(const TensorDict& params) const;
  OptimizerUpdate update(const TensorDict& params, const TensorDict& grads,
                         const TensorDict& state) const;
};

// Plain SGD without state: p - lr * g for every entry.
TensorDict sgd(const TensorDict& params, const TensorDict& grads, Scalar lr,
               Loc loc = Loc::current());

// sqrt of the sum of squares of every element of every tensor (an f32 scalar unless all are
// f64).
Tensor global_norm(const TensorDict& xs, Loc loc = Loc::current());
// Scales every gradient by max_norm / global_norm when the norm exceeds max_norm, chosen with
// where() inside the step (no host round trip). Writes the pre-clipping norm to *norm if given.
TensorDict clip_by_global_norm(const TensorDict& grads, Scalar max_norm, Tensor* norm = nullptr,
                               Loc loc = Loc::current());

}  // namespace fjit
