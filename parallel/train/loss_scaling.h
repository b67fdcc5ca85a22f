// The traced side of loss scaling in the training steps (the host side, the policy that
// moves the scale, is core/lib/loss_scale.h).
//
// With GradScaling::on the step multiplies its loss by `scale` (an f32 scalar input of the
// step: a new scale is new data, never a recompilation) before value_and_grad, and
// averaged_unscaled_gradients turns the replicas' gradients of that scaled loss into their
// mean, unscaled (times 1/scale) and in f32, ready for clipping and the optimizer:
//  - grad_dtype f32: pmean, then times 1/scale;
//  - grad_dtype f16: each gradient times the replica's mean weight, cast to f16 (storage:
//    half the all-reduce bytes; above 65504 it is inf), summed over the replicas in f16 (each
//    partial sum rounded to f16, in rank order), cast back to f32 and times 1/scale. This is
//    the half precision fjit has without f16 arithmetic: gradients stored and exchanged in f16.
// Then one check of kind loss_scale_overflow: every element of every averaged gradient is
// finite. Its report gives how many parameters have a non-finite gradient, the scale, and the
// first such parameter (its number in the order the message lists). The check is raised on
// every replica alike (it reads the averaged values), and the host's DynamicLossScale reads it
// from StepResult::raised; under the skip_step policy the step leaves parameters and optimizer
// state as they were.
//
// With f32 gradients and scale 1 the step's parameters and state are bit-identical to the
// unscaled step's: multiplying by 1 is exact.
#pragma once

#include <optional>
#include <string>

#include "core/ir/check_site.h"
#include "core/lib/loss_scale.h"
#include "core/trace/dict.h"
#include "core/trace/tensor.h"

namespace fjit::training {

struct GradScaling {
  bool on = false;                // off: no scaling op is traced (the step ignores its scale)
  DType grad_dtype = DType::f32;  // f32 or f16: the dtype of the gradients' all-reduce
};

// See the top of the file. `grads` are one replica's gradients of loss * scale (f32);
// `scale` an f32 scalar. Throws TraceError for a grad_dtype other than f32 or f16.
TensorDict averaged_unscaled_gradients(const TensorDict& grads, const Tensor& scale, DType grad_dtype,
                                       const std::string& axis);

// Host side, shared by the trainers. A run that scales its loss learns of an overflow from its
// check and must skip that step: checks on and the skip_step policy, which an unset policy
// becomes. Throws std::invalid_argument (naming `who`) for checks off or another policy.
void require_loss_scaling_checks(std::optional<CheckMode>& checks, std::optional<CheckPolicy>& policy,
                                 const char* who);
// The policy of a run's options: `loss_scale` "dynamic", a static number, or empty (dynamic),
// with `growth_interval`. Throws std::invalid_argument naming `who` for a bad value.
DynamicLossScale make_loss_scale(const std::string& loss_scale, int64_t growth_interval, const char* who);

}  // namespace fjit::training
