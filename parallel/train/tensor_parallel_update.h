// AdamW on a tensor-parallel mesh (parallel/shard_map.h, core/nn/tensor_parallel.h): the
// update of a shard_map'd step whose parameters are split over a model axis by a ShardSpec
// (tp_decoder_spec in parallel/tensor_parallel_spec.h), after the gradients have been averaged
// over the data axis. Each replica holds the blocks of the split parameters and the whole
// replicated ones, and the AdamW state of what it holds (tp_optimizer_state_spec); the update
// is elementwise, so each block's state moves as that block of the unsplit state would.
//
// The global gradient norm that clipping and the max_grad_norm check read is the unsplit
// model's: the squares of the split gradients are summed on each replica and psum'd over the
// model axis, and those of the replicated gradients (the same on every replica of the axis,
// the tensor-parallel layers' gradients being whole there) are counted once. Every replica of
// the axis gets the same norm, so all clip alike.
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "core/lib/optimizers.h"
#include "core/lib/param_groups.h"
#include "core/lib/schedules.h"
#include "parallel/shard_map.h"

namespace fjit::training {

// sqrt of the sum of squares of every element of the unsplit gradients (above): an f32 scalar
// unless every gradient is f64. Entries whose spec (spec.leaf(name)) names `axis` are split
// over it; every other entry is replicated along it.
Tensor tp_global_norm(const TensorDict& grads, const ShardSpec& spec, const std::string& axis,
                      Loc loc = Loc::current());

// adamw_update_of_mean (parallel/train/averaged_update.h) on a tensor-parallel mesh: the
// global norm by tp_global_norm; check: it is finite and below max_grad_norm; clipping to
// clip_norm when it is > 0 (by clip_norm / norm when the norm exceeds it); AdamW at
// schedule(step), per parameter group when `groups` are given. Returns {params', state', the
// norm before clipping}.
std::tuple<TensorDict, TensorDict, Tensor> tp_adamw_update_of_mean(
    const Params& params, const TensorDict& mean_grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, double clip_norm, const ShardSpec& spec,
    const std::string& axis, const std::vector<ParamGroup>& groups = {},
    const std::vector<std::string>* pattern_names = nullptr);

}  // namespace fjit::training
