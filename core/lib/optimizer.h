// What an optimizer is (the Optimizer concept), and how an elementwise one is declared once.
//
// An optimizer is a value of hyper-parameters with pure traced functions over TensorDicts: the
// state is an explicit input and output of the step, never held by the optimizer object.
//   init_state(params)        the state before the first step, on the host (ArrayDict)
//   init(params)              the same, traced (inside a step)
//   update(params, grads, s)  {new params, new state}
//   hyperparameters()         its settings by name, for logs and run configurations
//
// Most optimizers update each element of a parameter from the same element of its gradient
// and of its moments. Such an optimizer declares that update once, as `element`, a template
// over the value type V of one element (see Element), and a StateLayout; elementwise_init,
// elementwise_init_state and elementwise_update do the rest: the state's names and checks,
// the step counter, the moments' dicts. The same `element` recorded on compiled::Sym values
// (optimizer_compiled.h) is the compiled fused program the plan runs for the update, so the
// fast path cannot disagree with the traced update. core/README.md, "Adding an optimizer".
//
// State names derive from parameter names: "m.<name>" (first moment or momentum buffer),
// "v.<name>" (second moment), and "step" (an i32 scalar counting updates). Every moment has
// its parameter's dtype and shape; the order is m.*, v.*, step.
#pragma once

#include <concepts>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/trace/dict.h"
#include "core/trace/ops.h"

namespace fjit {

// A learning rate (or other hyper-parameter) given as a number baked into the step, or as a
// traced scalar Tensor (an argument of the step, for schedules without recompiling).
class Scalar {
 public:
  constexpr Scalar(double v) : value_(v) {}            // NOLINT: implicit on purpose
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
using Hyperparameters = std::vector<std::pair<std::string, Scalar>>;

template <class O>
concept Optimizer = requires(const O& o, const ArrayDict& a, const TensorDict& t) {
  { O::kName } -> std::convertible_to<const char*>;
  { o.init_state(a) } -> std::same_as<ArrayDict>;
  { o.init(t) } -> std::same_as<TensorDict>;
  { o.update(t, t, t) } -> std::same_as<OptimizerUpdate>;
  { o.hyperparameters() } -> std::same_as<Hyperparameters>;
};

// "AdamW(lr=0.001, b1=0.9, ...)"; a traced hyper-parameter prints as "traced".
std::string describe(const char* name, const Hyperparameters& hyperparameters);
template <Optimizer O>
std::string describe(const O& o) {
  return describe(O::kName, o.hyperparameters());
}

// What an elementwise optimizer keeps: 0, 1 (m) or 2 (m, v) moments per parameter, and
// whether it counts its updates ("step").
struct StateLayout {
  int moments = 0;
  bool counts_steps = false;
};

// One element of one parameter's update, over values of type V: traced Tensors here, or
// compiled::Sym when recording (optimizer_compiled.h). Both have the same members, so an
// `element` written against them compiles for both.
template <class V>
struct Element;

template <>
struct Element<Tensor> {
  Tensor p{}, g{};  // the parameter (set it to the new value) and its gradient
  Tensor m{}, v{};  // the moments the layout keeps (set them to their new values)
  Tensor step{};    // with counts_steps: this update's number, 1 for the first, as an f64 scalar
  DType dtype = DType::f32;  // the parameter's
  const char* api = "";
  Loc loc;

  // A hyper-parameter as a rank-0 value of `dt`. Values computed from scalars alone are
  // computed once per step, outside the compiled program, which reads them.
  Tensor scalar(const Scalar& s, DType dt) const { return s.as(dt, loc); }
  Tensor cast(const Tensor& x, DType dt) const { return fjit::cast(x, dt, loc); }
  // Marks a value that another part of the step may compute too and then pass in, such as
  // the squared gradient that a global norm also sums (compiled::Recorder::shared): traced,
  // the value itself.
  Tensor shared(const Tensor& x, const char* /*label*/) const { return x; }
  // A misuse of the optimizer: a TraceError naming it.
  [[noreturn]] void fail(const char* what) const;
};

// An optimizer declared by its per-element update (the concept's functions below then give
// it the Optimizer surface):
//   static constexpr const char* kName;
//   constexpr StateLayout layout() const;                   // may depend on hyper-parameters
//   template <class V> constexpr void element(Element<V>& x) const;
template <class O>
concept ElementwiseOptimizer = requires(const O& o, Element<Tensor>& x) {
  { O::kName } -> std::convertible_to<const char*>;
  { o.layout() } -> std::same_as<StateLayout>;
  o.element(x);
};

namespace optimizer_detail {
// grads[name], or a TraceError naming `api` when it is missing or does not match p.
const Tensor& gradient(const char* api, const TensorDict& grads, const std::string& name,
                       const Tensor& p, const Loc& loc);
ArrayDict init_state(const StateLayout& layout, const ArrayDict& params);
TensorDict init(const StateLayout& layout, const TensorDict& params);
OptimizerUpdate update(const char* api, const StateLayout& layout, const TensorDict& params,
                       const TensorDict& grads, const TensorDict& state,
                       const std::function<void(Element<Tensor>&)>& element);
// Registers the compiled programs derived from the optimizers (optimizers_compiled.cc) with
// the fused kernels, once; update() calls it, since a plan can only hold an update traced.
void use_compiled_programs();
}  // namespace optimizer_detail

// Zeros for every moment of every parameter, and step 0.
template <ElementwiseOptimizer O>
ArrayDict elementwise_init_state(const O& o, const ArrayDict& params) {
  return optimizer_detail::init_state(o.layout(), params);
}
template <ElementwiseOptimizer O>
TensorDict elementwise_init(const O& o, const TensorDict& params) {
  return optimizer_detail::init(o.layout(), params);
}
// Checks the gradients and the state against the parameters (a TraceError naming O and the
// missing or mismatched entry), counts the step, and runs o.element on every parameter.
template <ElementwiseOptimizer O>
OptimizerUpdate elementwise_update(const O& o, const TensorDict& params, const TensorDict& grads,
                                   const TensorDict& state) {
  return optimizer_detail::update(O::kName, o.layout(), params, grads, state,
                                  [&o](Element<Tensor>& x) { o.element(x); });
}

}  // namespace fjit
