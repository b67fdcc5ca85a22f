// ZeRO stages 1, 2 and 3 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models"): the optimizer state (stage 1), also the averaged gradients (stage 2) and the
// parameters (stage 3) sharded over the data axis.
//
// Each state tensor is held flat: parameter p's numel elements are padded with zeros to
// N * k, k = ceil(numel / N), and replica i holds elements [i k, (i + 1) k) ("m.<name>" and
// "v.<name>" of shape [k]; the padding updates zeros to zeros and is never read back). The
// i32 counter "step" stays whole on every replica. So a replica holds about 1/N of the state.
//
// The step (parallel/train/train_step.h with zero_stage = 1) all-reduces the gradients as the
// replicated step does, checks their global norm on the whole averaged gradient, updates this
// replica's slice of every parameter with its slice of the state, and all-gathers the updated
// slices into whole parameters (one all-gather per dtype). The update is elementwise, so each
// element is computed from the same bits as in the replicated step: the parameters are
// bit-identical to it (tests/zero_test.cc, tests/mpi/zero_mpi_test.cc).
//
// On the host, a sharded state is an ArrayDict passed to pmap as a sharded dict
// (PmapArgOptions::sharded_dicts): its entries hold the rows of this process's replicas
// (local_size * k; under MPI, one rank's k), and the step's new shards come back per replica
// (Pmapped::replica_outputs, gathered by zero_local_state).
//
// Stage 2 (zero2_adamw_update) also reduce-scatters the gradients instead of all-reducing them.
//
// Checkpoints: zero_gather_state puts the shards of every replica back together into the
// replicated step's whole state (the same names, shapes and bits), and zero_shard_state cuts a
// whole state into this process's shards for any replica count. A checkpoint holds the whole
// state, so it does not depend on the replica count that wrote it: a run resumes from it at
// another count (state resharded), or without ZeRO, and a replicated run's checkpoint resumes
// with ZeRO (tests/zero_trainer_test.cc, tests/mpi/zero_mpi_test.cc).
//
// The language model's step (parallel/lm/lm_step.h) takes stages 1, 2 and 3, with clipping by
// the global norm (ZeroClip below) and parameter groups at every stage.
//
// Stage 3 (zero3_gather_params, zero3_adamw_update) also shards the parameters, in the
// state's layout: replica i holds elements [i k, (i + 1) k) of each parameter, flat and
// zero-padded, as a sharded dict. The step all-gathers each parameter whole on its own
// (zero3_gather_params: one all-gather per parameter), computes the loss and gradients on them,
// reduce-scatters the gradients as stage 2 does and updates its shard; it returns the shards,
// not the whole parameters. Layer by layer, with or without overlap: each parameter's unpadded
// gather is placed just before the first instruction that reads it (core/compile/schedule.h),
// and the backward pass does not read the forward pass's gathered copy: each VJP rule that
// needs a parameter reads a gather of its own, traced where the backward pass reaches that rule
// (core/autodiff/recompute.h). So the memory plan frees each gathered parameter after its last
// forward read and each backward gather after its rule, and whole parameters are alive a few
// at a time instead of all from the step's start to the end of the backward pass. Prefetched
// (JitOptions::gather_prefetch, FJIT_GATHER_PREFETCH, on by default): each all-gather but the
// first starts ahead, before the previous layer's first reader, on the replica's collective
// worker, and is waited for just before its own first reader; so the next layer's parameters
// are gathered while the current one computes, and about two layers' gathered parameters are
// alive at once (tests/zero3_plan_test.cc measures the plan). Every replica still issues its
// collectives in graph order. Under MPI the worker needs MPI_THREAD_SERIALIZED (FJIT_OVERLAP=1
// set before start-up); otherwise the prefetched order runs on the plan's thread. On the host,
// zero_shard_params and zero_gather_params convert.
//
// Not here: loss scaling with stages 2 and 3. A backward gather whose VJP rule does not read
// the parameter (the bias of an add) is still issued, unread (a collective is never dead code).
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/lib/optimizers.h"
#include "core/lib/param_groups.h"
#include "core/lib/schedules.h"
#include "parallel/mesh.h"

namespace fjit::training {

// Elements of a parameter of `numel` elements that each of `replicas` replicas holds.
int64_t zero_shard_size(int64_t numel, int replicas);

// The initial sharded AdamW state of `params` for this process's replicas of `mesh`: zeros
// of shape [local_size * k] for each moment, and step 0.
ArrayDict zero_init_state(const ArrayDict& params, const Mesh& mesh);

// Bytes of the optimizer state one replica holds: the sharded state's (entries of shape
// [k] and the step counter) for `replicas` > 1 or zero_stage 1, the whole state's otherwise.
int64_t zero_state_bytes_per_replica(const ArrayDict& params, int replicas);

// The traced update of ZeRO stage 1 from gradients already averaged over `axis`: this
// replica's slice of each parameter and of the state updated, the parameters all-gathered.
// `state` holds this replica's shards. Returns {params', state' (shards), global norm}.
// With clip_norm > 0 the whole averaged gradient is clipped to that global norm first (as
// adamw_update_of_mean does, so the same bits), and `groups` apply per parameter name as in
// grouped_update (`pattern_names`: the names their patterns are checked against).
std::tuple<TensorDict, TensorDict, Tensor> zero1_adamw_update_of_mean(
    const Params& params, const TensorDict& mean_grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, const std::string& axis,
    double clip_norm = 0, const std::vector<ParamGroup>& groups = {},
    const std::vector<std::string>* pattern_names = nullptr);

// Stages 2 and 3: clipping and parameter groups. With norm > 0 the averaged gradient is
// clipped to that global norm, and the norm is the replicated step's, bit for bit: each
// averaged gradient's blocks are all-gathered whole in turn (one all-gather per parameter,
// each whole gradient freed after its sum of squares) and their sums of squares added as
// global_norm adds them; the clipping scale multiplies this replica's blocks (elementwise: the
// same bits as the whole gradient's). With norm 0 nothing is gathered and the norm is the
// square root of the sum over replicas of each replica's sum of squares of its blocks: its bits
// may differ from the replicated step's (another order of additions). `groups` apply per
// parameter name as in grouped_update (`pattern_names`: the names their patterns are checked
// against).
struct ZeroClip {
  double norm = 0;
  std::vector<ParamGroup> groups;
  const std::vector<std::string>* pattern_names = nullptr;
};

// ZeRO stage 2: the same update from this replica's gradients before averaging. pmean's
// operand is reduce-scattered (psum_scatter, bucketed) instead of all-reduced, so each replica
// receives only the block of the averaged gradient it updates: the same bits as that block of
// the all-reduce, hence the same parameters. The global norm and clipping: ZeroClip. Returns
// {params', state' (shards), global norm}.
std::tuple<TensorDict, TensorDict, Tensor> zero2_adamw_update(
    const Params& params, const TensorDict& grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, const std::string& axis,
    const ZeroClip& clip = {});

// The whole state (AdamW::init_state's names and shapes: "m.<name>", "v.<name>" shaped as
// the parameter, "step") from `local`, this process's replicas' shards of a state sharded over
// `mesh` (zero_init_state's layout). Under MPI every process must call it (an all-gather over
// the processes) and every process gets the whole state. Throws std::invalid_argument naming
// the entry when `local` does not have the layout `params` and `mesh` give.
ArrayDict zero_gather_state(const ArrayDict& local, const ArrayDict& params, const Mesh& mesh);

// This process's replicas' shards (zero_init_state's layout for `mesh`) of `whole`, a state
// with AdamW::init_state's names and shapes for `params`: replica i's elements [i k, (i + 1) k)
// of each moment, zeros past the parameter's end; "step" whole. Throws std::invalid_argument
// naming the entry when `whole` does not match `params`.
ArrayDict zero_shard_state(const ArrayDict& whole, const ArrayDict& params, const Mesh& mesh);

// The whole sharded state of this process's replicas after a step: replica 0's shards
// (`first`, what the step returned) followed along axis 0 by those of replicas 1 ..
// local_size - 1, read from their flat outputs (`replica_outputs(r)`), where the state's
// entries begin at leaf `offset`. The step counter is replica 0's.
// Stage 3. The name, dtype and shape of each parameter the step gathers, in order.
struct ZeroParamShape {
  std::string name;
  DType dtype;
  Shape shape;
};
std::vector<ZeroParamShape> zero_param_shapes(const ArrayDict& params);

// This process's replicas' shards of whole parameters: [local_size * k] per parameter, replica
// i's elements [i k, (i + 1) k), zeros past the end (as zero_shard_state cuts a moment).
ArrayDict zero_shard_params(const ArrayDict& whole, const Mesh& mesh);

// The whole parameters from this process's replicas' shards (zero_shard_params's layout).
// Under MPI every process must call it (an all-gather over the processes). Throws
// std::invalid_argument naming the parameter when `local` does not have that layout.
ArrayDict zero_gather_params(const ArrayDict& local, const std::vector<ZeroParamShape>& shapes, const Mesh& mesh);

// Traced: the whole parameters (`shapes`) from this replica's shards, all-gathered over
// `axis`, one all-gather per parameter, each marked recompute_in_backward (gathered again for
// each VJP rule that reads it; see the top of this file). Throws std::invalid_argument naming
// the parameter when a shard is missing or has another shape or dtype.
TensorDict zero3_gather_params(const TensorDict& shards, const std::vector<ZeroParamShape>& shapes,
                               const std::string& axis);

// Traced: stage 3's update from this replica's parameter shards and its gradients of the
// whole parameters before averaging: the gradients reduce-scattered (zero2_adamw_update),
// this replica's shards of the parameters and the state updated. Returns {param shards',
// state' (shards), global norm (stage 2's)}; clipping and groups as stage 2's (ZeroClip).
std::tuple<TensorDict, TensorDict, Tensor> zero3_adamw_update(
    const Params& shards, const TensorDict& grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, const std::string& axis,
    const ZeroClip& clip = {});

ArrayDict zero_local_state(const ArrayDict& first, const std::vector<const std::vector<Array>*>& others,
                           size_t offset);

}  // namespace fjit::training
