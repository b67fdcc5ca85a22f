// The examples' MLP trainer with --zero 1 and --zero 2 (ZeRO, parallel/train/zero.h) on 2 and 3
// thread replicas: 20 steps give the replicated trainer's losses and parameters bit for bit;
// checkpoints and the divergence check are refused with it.
#include <gtest/gtest.h>

#include "tests/zero_trainer_testing.h"

namespace fjit {
namespace {

TEST(ZeroTrainer, TrainsBitIdenticallyOnThreads) {
  for (int n : {2, 3}) {
    const auto ref = testing::zero_trainer_run(Mesh::threads(n), 0);
    for (int stage : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << n << " replicas, stage " << stage);
      testing::expect_same_training(ref, testing::zero_trainer_run(Mesh::threads(n), stage));
    }
  }
}

TEST(ZeroTrainer, CheckpointsAndDivergenceChecksAreRefused) {
  training::TrainOptions o = testing::zero_trainer_options(1);
  o.checkpoint_dir = "/tmp/fjit_zero_never_written";
  EXPECT_THROW(examples::Trainer(Mesh::threads(2), o, testing::fixture()), std::invalid_argument);
  o = testing::zero_trainer_options(1);
  o.divergence_check_every = 1;
  EXPECT_THROW(examples::Trainer(Mesh::threads(2), o, testing::fixture()), std::invalid_argument);
  examples::Trainer t(Mesh::threads(2), testing::zero_trainer_options(1), testing::fixture());
  EXPECT_THROW(t.save("/tmp/fjit_zero_never_written.safetensors"), std::runtime_error);
}

}  // namespace
}  // namespace fjit
