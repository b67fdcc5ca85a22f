// The examples' MLP trainer run for 20 steps replicated and with --zero 1 or 2, for
// tests/zero_trainer_test.cc (thread replicas) and tests/mpi/zero_mpi_test.cc (MPI ranks).
// Test-only, header-only.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "lib/trainer.h"
#include "tests/fixture_data.h"

namespace fjit::testing {

// Layers 784-37-10: parameter sizes 29008, 37, 370 and 10, which 2 and 3 do not all divide;
// batches of 8 split unevenly over 3 replicas.
inline training::TrainOptions zero_trainer_options(int zero_stage) {
  training::TrainOptions o;
  o.model = "mlp";
  o.layers = {784, 37, 10};
  o.batch_size = 8;
  o.epochs = 100;
  o.max_steps = 20;
  o.seed = 5;
  o.log_every = 0;
  o.eval_batch_size = 8;
  o.zero_stage = zero_stage;
  return o;
}

struct ZeroTrainerRun {
  std::vector<float> losses;
  ArrayDict params;
};

inline ZeroTrainerRun zero_trainer_run(const Mesh& mesh, int zero_stage) {
  examples::Trainer t(mesh, zero_trainer_options(zero_stage), fixture());
  ZeroTrainerRun run;
  while (auto s = t.step()) run.losses.push_back(s->loss);
  run.params = t.params();
  return run;
}

inline void expect_same_training(const ZeroTrainerRun& ref, const ZeroTrainerRun& zero) {
  ASSERT_EQ(ref.losses.size(), 20u);
  ASSERT_EQ(zero.losses.size(), 20u);
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(ref.losses[i]), std::bit_cast<uint32_t>(zero.losses[i])) << "step " << i + 1;
  for (const auto& [name, p] : ref.params)
    EXPECT_TRUE(p.bit_equal(zero.params.at(name))) << "parameter " << name << " after 20 steps";
  EXPECT_NE(ref.losses.front(), ref.losses.back());  // it trained
}

}  // namespace fjit::testing
