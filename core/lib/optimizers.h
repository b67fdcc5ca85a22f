// The optimizers: each a set of hyper-parameters and its per-element update, declared once
// (optimizer.h says how; core/README.md, "Adding an optimizer").
//
//   AdamW opt{.lr = 1e-3, .weight_decay = 1e-2};
//   ArrayDict state = opt.init_state(params);                 // host side, before the loop
//   auto step = jit([opt](const Params& p, const Params& s, const Tensor& x, const Tensor& y) {
//     auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
//     auto [p2, s2] = opt.update(p, clip_by_global_norm(g, 1.0), s);
//     return std::tuple{p2, s2, loss};
//   });
//
// The update reads nothing back to the host, so it compiles into the step, and the plan runs
// it as the compiled program derived from `element` (optimizers_compiled.cc lists the forms).
// Semantics follow PyTorch's torch.optim (documented per optimizer); weight decay applies to
// every parameter given (pass a sub-dict to exclude some).
#pragma once

#include "core/lib/optimizer.h"

namespace fjit {

// g <- g + weight_decay * p;  buf <- momentum * buf + g;  g <- nesterov ? g + momentum * buf : buf;
// p <- p - lr * g. (torch.optim.SGD with dampening 0.) State: "m.<name>" when momentum != 0,
// else empty.
struct SGD {
  static constexpr const char* kName = "SGD";
  Scalar lr = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;

  constexpr StateLayout layout() const { return {.moments = momentum != 0.0 ? 1 : 0}; }
  template <class V>
  constexpr void element(Element<V>& x) const {
    if (nesterov && momentum <= 0.0) x.fail("nesterov momentum requires momentum > 0");
    V g = x.g;
    if (weight_decay != 0.0) g = g + x.p * weight_decay;
    if (momentum != 0.0) {
      x.m = x.m * momentum + g;
      g = nesterov ? g + x.m * momentum : x.m;
    }
    x.p = x.p - x.scalar(lr, x.dtype) * g;
  }

  Hyperparameters hyperparameters() const {
    return {{"lr", lr}, {"momentum", momentum}, {"nesterov", nesterov ? 1.0 : 0.0},
            {"weight_decay", weight_decay}};
  }
  ArrayDict init_state(const ArrayDict& params) const { return elementwise_init_state(*this, params); }
  TensorDict init(const TensorDict& params) const { return elementwise_init(*this, params); }
  OptimizerUpdate update(const TensorDict& params, const TensorDict& grads,
                         const TensorDict& state) const {
    return elementwise_update(*this, params, grads, state);
  }
};

// The Adam family's update. With t the step's number:
//   m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2;
//   p <- p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// Weight decay is either added to the gradient (L2, Adam's) or, `decoupled`, applied to the
// parameter itself: p <- p (1 - lr * weight_decay) before the step (AdamW's).
template <class V>
constexpr void adam_element(Element<V>& x, const Scalar& lr, double b1, double b2, double eps,
                            double weight_decay, bool decoupled) {
  // The bias corrections in float64 whatever the parameters' dtype, rounded once: in f32,
  // b2^t for t in the thousands loses most of 1 - b2^t's digits.
  const V bc1 = 1.0 - pow(x.scalar(b1, DType::f64), x.step);
  const V bc2 = 1.0 - pow(x.scalar(b2, DType::f64), x.step);
  const V lr_t = x.scalar(lr, x.dtype);
  const V step_size = x.cast(x.scalar(lr, DType::f64) / bc1, x.dtype);
  const V inv_sqrt_bc2 = x.cast(rsqrt(bc2), x.dtype);
  V g = x.g, base = x.p;
  if (weight_decay != 0.0) {
    if (decoupled) base = x.p * (1.0 - lr_t * weight_decay);
    else g = g + x.p * weight_decay;
  }
  x.m = x.m * b1 + g * (1.0 - b1);
  // A step that also takes the gradients' global norm computes g^2 once for both.
  x.v = x.v * b2 + x.shared(square(g), "sq") * (1.0 - b2);
  x.p = base - step_size * (x.m / (sqrt(x.v) * inv_sqrt_bc2 + eps));
}

// torch.optim.Adam: weight_decay (L2, added to the gradient) defaults to 0.
struct Adam {
  static constexpr const char* kName = "Adam";
  Scalar lr = 1e-3;
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;

  constexpr StateLayout layout() const { return {.moments = 2, .counts_steps = true}; }
  template <class V>
  constexpr void element(Element<V>& x) const {
    adam_element(x, lr, b1, b2, eps, weight_decay, /*decoupled=*/false);
  }

  Hyperparameters hyperparameters() const {
    return {{"lr", lr}, {"b1", b1}, {"b2", b2}, {"eps", eps}, {"weight_decay", weight_decay}};
  }
  ArrayDict init_state(const ArrayDict& params) const { return elementwise_init_state(*this, params); }
  TensorDict init(const TensorDict& params) const { return elementwise_init(*this, params); }
  OptimizerUpdate update(const TensorDict& params, const TensorDict& grads,
                         const TensorDict& state) const {
    return elementwise_update(*this, params, grads, state);
  }
};

// Adam with decoupled weight decay (torch.optim.AdamW; its default weight_decay is 1e-2).
struct AdamW {
  static constexpr const char* kName = "AdamW";
  Scalar lr = 1e-3;
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;

  constexpr StateLayout layout() const { return {.moments = 2, .counts_steps = true}; }
  template <class V>
  constexpr void element(Element<V>& x) const {
    adam_element(x, lr, b1, b2, eps, weight_decay, /*decoupled=*/true);
  }

  Hyperparameters hyperparameters() const {
    return {{"lr", lr}, {"b1", b1}, {"b2", b2}, {"eps", eps}, {"weight_decay", weight_decay}};
  }
  ArrayDict init_state(const ArrayDict& params) const { return elementwise_init_state(*this, params); }
  TensorDict init(const TensorDict& params) const { return elementwise_init(*this, params); }
  OptimizerUpdate update(const TensorDict& params, const TensorDict& grads,
                         const TensorDict& state) const {
    return elementwise_update(*this, params, grads, state);
  }
};

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as lion-pytorch:
//   c <- b1 m + (1-b1) g;  p <- p (1 - lr * weight_decay) - lr * sign(c);  m <- b2 m + (1-b2) g.
// Every element moves by lr exactly, so lr is typically 3-10x smaller than AdamW's and
// weight_decay as much larger. State: "m.<name>".
struct Lion {
  static constexpr const char* kName = "Lion";
  Scalar lr = 1e-4;
  double b1 = 0.9;
  double b2 = 0.99;
  double weight_decay = 0.0;

  constexpr StateLayout layout() const { return {.moments = 1}; }
  template <class V>
  constexpr void element(Element<V>& x) const {
    const V lr_t = x.scalar(lr, x.dtype);
    const V base = weight_decay != 0.0 ? x.p * (1.0 - lr_t * weight_decay) : x.p;
    x.p = base - lr_t * sign(x.m * b1 + x.g * (1.0 - b1));
    x.m = x.m * b2 + x.g * (1.0 - b2);
  }

  Hyperparameters hyperparameters() const {
    return {{"lr", lr}, {"b1", b1}, {"b2", b2}, {"weight_decay", weight_decay}};
  }
  ArrayDict init_state(const ArrayDict& params) const { return elementwise_init_state(*this, params); }
  TensorDict init(const TensorDict& params) const { return elementwise_init(*this, params); }
  OptimizerUpdate update(const TensorDict& params, const TensorDict& grads,
                         const TensorDict& state) const {
    return elementwise_update(*this, params, grads, state);
  }
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

static_assert(Optimizer<SGD> && Optimizer<Adam> && Optimizer<AdamW> && Optimizer<Lion>);

// The names of the compiled programs derived from the optimizers above (a plan dump's
// "[compiled: <name>]"), registering them with the fused kernels if no update has yet.
std::vector<std::string> compiled_optimizer_programs();

}  // namespace fjit
