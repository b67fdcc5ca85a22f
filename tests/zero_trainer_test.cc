// The examples' MLP trainer with --zero 1, 2 and 3 (ZeRO, parallel/train/zero.h) on 2 and 3
// thread replicas: 20 steps give the replicated trainer's losses and parameters bit for bit;
// the divergence check is refused with it. Checkpoints: a ZeRO run's checkpoint holds the same
// tensors as the replicated run's at that step, and resuming it at 1, 2 or 3 replicas (state
// resharded) continues bit for bit as the replicated run resumed from its own checkpoint at
// that count; at the count that wrote it, as the run that never stopped.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/zero_trainer_testing.h"

namespace fjit {
namespace {

TEST(ZeroTrainer, TrainsBitIdenticallyOnThreads) {
  for (int n : {2, 3}) {
    const auto ref = testing::zero_trainer_run(Mesh::threads(n), 0);
    for (int stage : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << n << " replicas, stage " << stage);
      testing::expect_same_training(ref, testing::zero_trainer_run(Mesh::threads(n), stage));
    }
  }
}

TEST(ZeroTrainer, DivergenceChecksAreRefused) {
  training::TrainOptions o = testing::zero_trainer_options(1);
  o.divergence_check_every = 1;
  EXPECT_THROW(examples::Trainer(Mesh::threads(2), o, testing::fixture()), std::invalid_argument);
}

TEST(ZeroTrainer, CheckpointsResumeResharded) {
  const auto dir = std::filesystem::temp_directory_path() / ("fjit_zero_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string replicated = (dir / "replicated.safetensors").string();
  testing::zero_train_and_save(Mesh::threads(2), 0, replicated);
  // The run that never stopped, on 2 replicas.
  examples::Trainer straight(Mesh::threads(2), testing::zero_resume_options(0, 20), testing::fixture());
  testing::ZeroTrainerRun never_stopped;
  while (auto s = straight.step())
    if (straight.steps_done() > 10) never_stopped.losses.push_back(s->loss);
  never_stopped.params = straight.params();
  for (int stage : {1, 2, 3}) {
    const std::string path = (dir / ("zero" + std::to_string(stage) + ".safetensors")).string();
    testing::zero_train_and_save(Mesh::threads(2), stage, path);
    SCOPED_TRACE(::testing::Message() << "saved by 2 replicas at stage " << stage);
    testing::expect_same_checkpoint_tensors(replicated, path);
    {
      SCOPED_TRACE("resumed by 2 replicas: the run that never stopped");
      ArrayDict state;
      testing::expect_same_resumed(never_stopped, testing::zero_resume_run(Mesh::threads(2), stage, path, &state));
      for (const auto& [name, s] : straight.optimizer_state())
        EXPECT_TRUE(s.bit_equal(state.at(name))) << "optimizer state " << name << " after step 20";
    }
    for (int n : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << "resumed by " << n << " replicas: the replicated run resumed there");
      ArrayDict ref_state, state;
      const auto ref = testing::zero_resume_run(Mesh::threads(n), 0, replicated, &ref_state);
      testing::expect_same_resumed(ref, testing::zero_resume_run(Mesh::threads(n), stage, path, &state));
      for (const auto& [name, s] : ref_state) EXPECT_TRUE(s.bit_equal(state.at(name))) << "optimizer state " << name;
      EXPECT_NE(ref.losses.front(), ref.losses.back());  // it trained after the resume
    }
  }
  // A replicated run's checkpoint resumes with ZeRO as well (the file is the same).
  testing::expect_same_resumed(testing::zero_resume_run(Mesh::threads(3), 0, replicated),
                               testing::zero_resume_run(Mesh::threads(3), 2, replicated));
  testing::expect_same_resumed(testing::zero_resume_run(Mesh::threads(3), 0, replicated),
                               testing::zero_resume_run(Mesh::threads(3), 3, replicated));
  std::filesystem::remove_all(dir);
}

TEST(ZeroTrainer, ShardingAWholeStateAndGatheringItBackIsTheIdentity) {
  const ArrayDict params = testing::zero_test_params();
  ArrayDict whole = AdamW{}.init_state(params);
  for (const auto& [name, a] : whole)
    if (a.rank() > 0)
      for (int64_t i = 0; i < a.size(); ++i) whole.at(name).data<float>()[i] = static_cast<float>(i) + 0.5f;
  for (int n : {1, 2, 3, 4}) {
    const Mesh mesh = Mesh::threads(n);
    const ArrayDict shards = training::zero_shard_state(whole, params, mesh);
    for (const auto& [name, s] : shards)
      if (s.rank() > 0) {
        const int64_t k = training::zero_shard_size(params.at(name.substr(2)).size(), n);
        ASSERT_EQ(s.shape(), (Shape{n * k})) << name;
        for (int64_t j = params.at(name.substr(2)).size(); j < n * k; ++j) EXPECT_EQ(s.data<float>()[j], 0.0f) << name;
      }
    const ArrayDict back = training::zero_gather_state(shards, params, mesh);
    for (const auto& [name, w] : whole) EXPECT_TRUE(w.bit_equal(back.at(name))) << n << " replicas: " << name;
  }
  // A state for another replica count is refused, naming the entry.
  const ArrayDict two = training::zero_shard_state(whole, params, Mesh::threads(2));
  EXPECT_THROW(training::zero_gather_state(two, params, Mesh::threads(3)), std::invalid_argument);
}

}  // namespace
}  // namespace fjit
