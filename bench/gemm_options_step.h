// The whole training step against the FMA peak (issue 18's "large step's GFLOP/s as a fraction
// of the peak"): the MLP 784-512-512-10 batch-128 SGD step as bench/train_step_bench.cc runs
// it (jit of value_and_grad + sgd, parameters donated, run_into), on the calling thread with
// the intra-op thread count already set.
#pragma once

namespace fjit::bench {

struct StepTiming {
  double seconds = 0;  // median over rounds of the mean step time of each round
  double flops = 0;    // the plan's matmul FLOPs (Executable::flops)
  double of_peak = 0;  // median over rounds of GFLOP/s / the peak sampled after the round
};

// `rounds` rounds of about `ms` milliseconds of steps each, after a warm-up; after each round
// peak_sample() (GFLOP/s), where it is not null.
StepTiming time_large_mlp_step(int rounds, double ms, double (*peak_sample)() = nullptr);

}  // namespace fjit::bench
