// The silent-data-corruption sentinel of certified runs (issue 30, item 5), traced into a
// data-parallel training step before its all-reduce.
//
// Every `every` steps (step index % every == 0) each replica r recomputes the gradient share of
// replica (r + 1) mod N from that replica's rows (all-gathered) and its replica index (its
// dropout key), and compares a float64 sketch of it with the sketch replica r + 1 made of the
// gradient it is about to all-reduce. A mismatch fails a check on replica r naming replica
// r + 1, the step index and the sketches' difference, reported as any check is, on every replica.
// That check has a kind of its own, CheckKind::sentinel ("sentinel check at ..." in the report;
// StepResult::raised tells it apart), recorded under every check mode: `--checks off` does not
// turn the sentinel off; only leaving out `--sentinel K` does.
//
// Promises:
//  - The recomputation is the same traced function of the same inputs as the share it checks
//    (gradient_of with that replica's rows and index), so on a healthy machine it is
//    bit-identical (fjit's kernels do not depend on the replica, the buffer or the thread
//    count), and a clean run never raises. What it finds: a replica whose gradient differs from
//    what its neighbour computes for it (a faulty core, a flipped bit).
//  - The sketch is sum(g * w) in float64 over every gradient tensor, w an outer product of
//    fixed pseudo-random vectors in [1, 2), one per axis (the same on every replica): a single
//    changed element changes it, and so does a swap of two elements in different rows and
//    columns. Non-finite sketches on both sides compare equal (the finite-loss and norm checks
//    report those).
//  - Off the due steps the recomputation is not run (a cond); the step computes exactly what it
//    computes without the sentinel.
//  - Every replica's rows must have the same shape (the all-gather): the trainer refuses a
//    sentinel with a global batch that does not split evenly at start-up, naming the shares'
//    sizes; traced on uneven shards, check_gradient_sentinel throws std::invalid_argument.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/trace/dict.h"
#include "core/trace/tensor.h"

namespace fjit::training {

// The gradient of one replica's share: its rows (xs, ys) and its index on the axis (an i32
// scalar, for its dropout key).
using ShareGradient = std::function<TensorDict(const Tensor& xs, const Tensor& ys, const Tensor& replica)>;

void check_gradient_sentinel(const TensorDict& grads, const Tensor& x, const Tensor& y, const Tensor& step,
                             int64_t every, const std::string& axis, const ShareGradient& gradient_of);

}  // namespace fjit::training
