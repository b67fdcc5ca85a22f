// DP-SGD (Abadi et al., 2016) for the examples' MLP classifier: each example's gradient,
// from vmap(grad(loss of one example)), is clipped to L2 norm C over all parameters together,
// the clipped gradients are summed, Gaussian noise N(0, (sigma C)^2) is added, and the sum is
// divided by the global batch size before the optimizer's update.
//
// Data-parallel (pmap over `axis`): each replica clips its own examples, the clipped sums are
// psum'ed, and the noise is drawn once for the global batch from the step's key,
// fold_in(PRNGKey(seed), step) (no replica index), identically on every replica after the
// psum: the noise does not depend on how the batch is split.
//
// Bits: the clipped sum is exact and so independent of the order of its terms. Each clipped
// gradient element v (|v| <= C) is written as two integers on a fixed-point grid, v 2^k =
// hi + lo 2^-31 + (less than 2^-31), k = fixed_point_bits(C) so that C 2^k <= 2^30 (a grid
// step of about C 2^-61); the his and the los are summed in f64 (exactly: every partial sum
// stays below 2^53 for batches below 2^22) and psum'ed (exactly), then scaled back.
// So the parameters after a step are bit-identical with threads and with MPI ranks (same
// replica count), and also across replica counts (1, 2 or 3 replicas on one global batch)
// wherever each example's own gradient gets the same bits whatever other rows share its
// products. fjit's products do not promise that: at the Fashion-MNIST MLP's shapes a row's
// logits differ in the last bits between 128 and 64 rows (with BLIS and with FJIT_GEMM=fjit),
// so there the replica count changes the last bits; the clipped sum and the noise never do.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>

#include "fjit.h"

namespace fjit::examples {

// The loss of one example: x [features], y [] (i32 label).
using ExampleLoss = std::function<Tensor(const Params& p, const Tensor& x, const Tensor& y)>;

// Softmax cross entropy of the MLP (lib/mlp_model.h's mlp_logits) on one example.
Tensor mlp_example_loss(const Params& p, const Tensor& x, const Tensor& y);

// Each example's gradient: vmap(grad(loss), {kUnbatched, 0, 0}); every leaf [B, ...param].
TensorDict per_example_gradients(const ExampleLoss& loss, const Params& p, const Tensor& x,
                                 const Tensor& y);
// The L2 norm of each example's whole gradient (all leaves together): f32 [B].
Tensor per_example_norms(const TensorDict& grads);
// Each example's clipping factor C / max(C, norm): f32 [B] in (0, 1].
Tensor clip_factors(const Tensor& norms, double clip);
// sum over b of factors[b] * grads[b] for every leaf, in f32 (one product per leaf).
TensorDict clipped_sum(const TensorDict& grads, const Tensor& factors);

// The largest k with clip * 2^k <= 2^30. Throws std::invalid_argument for clip not finite or
// not positive.
int fixed_point_bits(double clip);
// The same sum, exact, as two dicts of f64 leaves holding integers: over b, with v =
// factors[b] grads[b] 2^k, the sums of hi = trunc(v) and of lo = trunc((v - hi) 2^31).
struct FixedSum {
  TensorDict hi, lo;
};
FixedSum clipped_sum_fixed(const TensorDict& grads, const Tensor& factors, int k);

// The privatized mean gradient of a global batch of `global_count` examples (f32 scalar) from
// the psum'ed fixed-point sums: ((hi + lo 2^-31) 2^-k + sigma C N(0, 1)) / global_count, the
// noise of leaf i drawn from fold_in(key, i) in the order of the dict's names. f32 leaves.
TensorDict noised_mean(const FixedSum& sum, int k, const Tensor& key, double clip, double noise,
                       const Tensor& global_count);

// The data-parallel DP-SGD step, pmap'd over `axis`:
//   (params, state, x, y, step) -> {params', state', mean loss, fraction of examples clipped}
// x [local batch, 784] f32, y [local batch] i32; step: i32 scalar (replicated), the step's
// index, which picks the noise key and the learning rate schedule(step).
struct DpSgdStepFn {
  AdamW optimizer;
  Schedule schedule = Schedule::constant(1e-3);
  double clip = 1.0;   // C
  double noise = 1.0;  // sigma
  uint64_t seed = 0;   // of the noise keys
  std::string axis = "batch";
  std::tuple<TensorDict, TensorDict, Tensor, Tensor> operator()(
      const Params& params, const Params& state, const Tensor& x, const Tensor& y,
      const Tensor& step) const;
};
using DpSgdStep = Pmapped<DpSgdStepFn>;

// pmap of the step with argument 4 (the step index) replicated. Throws std::invalid_argument
// for a clip that is not positive or a negative noise.
DpSgdStep make_dp_sgd_step(const Mesh& mesh, DpSgdStepFn fn, PmapOptions options = {});

}  // namespace fjit::examples
