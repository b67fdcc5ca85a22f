// Learning-rate schedules: functions of the step counter (0-based) that give the same value
// on the host and inside a traced step, so a step can compute its own learning rate from a
// step argument or from the optimizer's "step" state without recompiling.
//
//   Schedule lr = Schedule::warmup(500, Schedule::cosine(1e-3, 9000));
//   double now = lr(1200);                                  // host, float64
//   auto step = jit([lr](const Params& p, const Tensor& t, ...) {
//     AdamW opt{.lr = lr(t)};                               // traced: f32 scalar of step t
//     ...
//   });
//
// Promises:
//  - The traced value is the host formula evaluated in float64 inside the step and rounded
//    once to the requested dtype: it agrees with the host value to float64 rounding (the two
//    may contract multiply-adds differently), so in f32 to within one unit in the last place.
//    The step Tensor may be any numeric scalar; steps up to 2^31 are exact.
//  - A step before 0 counts as step 0; a schedule holds its final value after its last step.
//  - describe() names the schedule and its parameters in one line; a checkpoint records it so
//    that a resumed run with a different schedule is noticed (core/io/checkpoint.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/trace/tensor.h"

namespace fjit {

class Schedule {
 public:
  // value at every step.
  static Schedule constant(double value);
  // from + (to - from) * t / steps for t < steps, then `to`. REQUIRES steps >= 1.
  static Schedule linear(double from, double to, int64_t steps);
  // final + (peak - final) * (1 + cos(pi * t / steps)) / 2 for t < steps, then `final`
  // (torch.optim.lr_scheduler.CosineAnnealingLR, optax.cosine_decay_schedule). REQUIRES steps >= 1.
  static Schedule cosine(double peak, int64_t steps, double final_value = 0.0);
  // initial * gamma^floor(t / every) (torch.optim.lr_scheduler.StepLR). REQUIRES every >= 1.
  static Schedule step_decay(double initial, int64_t every, double gamma);
  // then(0) * t / steps for t < steps (a linear warm-up from 0), then then(t - steps).
  // REQUIRES steps >= 1.
  static Schedule warmup(int64_t steps, Schedule then);

  // The value at `step` on the host.
  double operator()(int64_t step) const;
  // The value at `step` (a numeric scalar Tensor of the current trace) as a scalar of
  // `dtype` (f32 or f64).
  Tensor operator()(const Tensor& step, DType dtype = DType::f32, Loc loc = Loc::current()) const;

  std::string describe() const;

  struct Node;  // the schedule's formula (core/lib/schedules.cc)

 private:
  explicit Schedule(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  std::shared_ptr<const Node> node_;
};

}  // namespace fjit
