// The update both trainers' steps end with (parallel/train/train_step.h, parallel/lm/lm_step.h),
// after each replica has its gradients:
//   pmean of the gradients over `axis` (one fused all-reduce of the whole TensorDict);
//   check: their global norm is finite and below max_grad_norm;
//   clipping to clip_norm when it is > 0 (the norm checked and returned is the one before);
//   AdamW at the learning rate schedule(step), per parameter group when `groups` are given
//   (core/lib/param_groups.h; the patterns checked against *pattern_names when given).
// Returns {params', state', global norm of the averaged gradients}.
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "core/lib/optimizers.h"
#include "core/lib/param_groups.h"
#include "core/lib/schedules.h"

namespace fjit::training {

std::tuple<TensorDict, TensorDict, Tensor> averaged_adamw_update(
    const Params& params, const TensorDict& grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, double clip_norm,
    const std::string& axis, const std::vector<ParamGroup>& groups = {},
    const std::vector<std::string>* pattern_names = nullptr);

// The same update from gradients already averaged over the replicas (every step after its
// pmean: parallel/train/loss_scaling.h averages them itself).
std::tuple<TensorDict, TensorDict, Tensor> adamw_update_of_mean(
    const Params& params, const TensorDict& mean_grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, double clip_norm,
    const std::vector<ParamGroup>& groups = {}, const std::vector<std::string>* pattern_names = nullptr);

}  // namespace fjit::training
