// ZeRO stages 1, 2 and 3 with thread replicas (parallel/train/zero.h): 20 steps of the MLP's training
// step give bit-identical parameters, losses and gradient norms (stages 2 and 3: norms within 1e-5) to the replicated step on 1, 2
// and 3 replicas, with parameter sizes 2 and 3 do not divide and an uneven batch split; each
// replica's state is its slice of the replicated state (zeros past the end); and the state one
// replica holds falls as 1/N (closed form of the shard sizes, and the bytes the step returned),
// and at stage 3 the parameters one replica holds too.
#include <gtest/gtest.h>

#include "tests/zero_testing.h"

namespace fjit {
namespace {

constexpr int kSteps = 20;

TEST(Zero, Stages1To3AreBitIdenticalToTheReplicatedStep) {
  for (int n : {1, 2, 3}) {
    for (int64_t rows : {12, 11}) {
      const Mesh mesh = Mesh::threads(n);
      const auto ref = testing::zero_test_run(mesh, 0, kSteps, rows);
      for (int stage : {1, 2, 3}) {
        SCOPED_TRACE(::testing::Message() << n << " replicas, batch " << rows << ", stage " << stage);
        const auto zero = testing::zero_test_run(mesh, stage, kSteps, rows);
        testing::expect_same_bits(ref, zero, "zero", stage == 1);
        testing::expect_state_is_slices(ref.state, zero.state, n, 0, n);
      }
      // The parameters moved: the comparison is not of untouched initial values.
      EXPECT_FALSE(ref.params.back().at("w1").bit_equal(testing::zero_test_mlp().init(3).at("w1")));
    }
  }
}

TEST(Zero, StateBytesPerReplicaFallAsOneOverN) {
  const ArrayDict params = testing::zero_test_mlp().init(3);
  int64_t whole = 0;
  for (const auto& kv : AdamW{}.init_state(params)) whole += static_cast<int64_t>(kv.second.nbytes());
  EXPECT_EQ(training::zero_state_bytes_per_replica(params, 1), whole);
  for (int n : {1, 2, 3}) {
    const int64_t bytes = training::zero_state_bytes_per_replica(params, n);
    // Two f32 moments of ceil(numel / n) elements per parameter, plus the i32 step counter:
    // at most 1/n of the moments plus one padding element per moment and parameter.
    const int64_t moments = whole - 4;
    EXPECT_LE(bytes - 4, moments / n + 2 * 4 * static_cast<int64_t>(params.size())) << n;
    EXPECT_GE((bytes - 4) * n, moments) << n;
    // What one replica's step really takes and returns.
    for (int stage : {1, 2, 3}) {
      const auto run = testing::zero_test_run(Mesh::threads(n), stage, 1, 12);
      EXPECT_EQ(run.replica_state_bytes, bytes) << n << " replicas, stage " << stage;
      // Stage 3: one replica returns ceil(numel / n) of each parameter: the moments' half.
      if (stage == 3) {
        EXPECT_EQ(run.replica_param_bytes, (bytes - 4) / 2) << n << " replicas";
      }
    }
  }
  // 7x37 + 37 + 37x3 + 3 = 410 f32 per moment: 3284 bytes whole, 1660 on 2, 1108 on 3.
  EXPECT_EQ(whole, 2 * 410 * 4 + 4);
  EXPECT_EQ(training::zero_state_bytes_per_replica(params, 2), 2 * (130 + 19 + 56 + 2) * 4 + 4);
  EXPECT_EQ(training::zero_state_bytes_per_replica(params, 3), 2 * (87 + 13 + 37 + 1) * 4 + 4);
}

TEST(Zero, OtherStagesAreRefused) {
  training::TrainStepFn fn;
  fn.model = testing::zero_test_mlp();
  fn.zero_stage = 4;
  EXPECT_THROW(training::make_train_step(Mesh::threads(2), fn, PmapOptions{}), std::invalid_argument);
  fn.zero_stage = 3;  // without the parameters' shapes
  EXPECT_THROW(training::make_train_step(Mesh::threads(2), fn, PmapOptions{}), std::invalid_argument);
  fn.zero3_shapes = training::zero_param_shapes(fn.model.init(3));
  fn.scaling.on = true;
  EXPECT_THROW(training::make_train_step(Mesh::threads(2), fn, PmapOptions{}), std::invalid_argument);
}

}  // namespace
}  // namespace fjit
