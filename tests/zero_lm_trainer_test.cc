// The language-model trainer with --zero 1, 2 and 3 (parallel/lm/lm_trainer.h,
// parallel/train/zero.h) on 1, 2 and 3 thread replicas: the replicated trainer's losses,
// gradient norms, parameters and (gathered) optimizer state bit for bit; its checkpoint holds
// the replicated run's tensors; a checkpoint resumed at another replica count (state, and at
// stage 3 parameters, resharded) continues as the replicated trainer resumed from the same
// file, and as the run that never stopped; --zero 4 is refused by the option parser.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/zero_lm_testing.h"

namespace fjit {
namespace {

TEST(ZeroLmTrainer, StagesAreBitIdenticalToTheReplicatedTrainer) {
  testing::ScopedTempDir dir("fjit_zero_lm");
  for (int n : {1, 2, 3}) {
    const auto ref = testing::zero_lm_run(Mesh::threads(n), dir.path(), 0);
    EXPECT_NE(ref.losses.front(), ref.losses.back());  // it trained
    for (int stage : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << n << " replicas, stage " << stage);
      const auto zero = testing::zero_lm_run(Mesh::threads(n), dir.path(), stage);
      testing::expect_same_lm_run(ref, zero, 6);
      // Each replica held ceil(numel / n) elements of each moment (and at stage 3 of each
      // parameter).
      for (const auto& [name, p] : ref.params) {
        const Shape shard{n * training::zero_shard_size(p.size(), n)};
        EXPECT_EQ(zero.local_state.at("m." + name).shape(), shard) << name;
        EXPECT_EQ(zero.local_params.at(name).shape(), stage == 3 ? shard : p.shape()) << name;
      }
    }
  }
}

TEST(ZeroLmTrainer, CheckpointsResumeResharded) {
  testing::ScopedTempDir dir("fjit_zero_lm_resume");
  auto file = [&](const std::string& name) { return dir.path() + "/" + name + ".safetensors"; };
  // Written by 2 replicas, replicated and at stage 1: the same tensors.
  testing::zero_lm_train_and_save(Mesh::threads(2), dir.path(), 0, file("replicated"));
  const auto straight = testing::zero_lm_run(Mesh::threads(2), dir.path(), 0);
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    testing::zero_lm_train_and_save(Mesh::threads(2), dir.path(), stage, file("zero"));
    testing::expect_same_lm_checkpoint_tensors(file("replicated"), file("zero"));
    // Resumed at 2 (the run that never stopped), and at 1 and 3 (resharded): as the replicated
    // trainer resumes the same file at that count.
    const auto resumed = testing::zero_lm_resume(Mesh::threads(2), dir.path(), stage, file("zero"));
    ASSERT_EQ(resumed.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(straight.losses[i + 3], resumed.losses[i]) << "step " << i + 3;
    for (const auto& [name, p] : straight.params) EXPECT_TRUE(p.bit_equal(resumed.params.at(name))) << name;
    for (int m : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << "resumed on " << m << " replicas");
      testing::expect_same_lm_run(testing::zero_lm_resume(Mesh::threads(m), dir.path(), 0, file("replicated")),
                                  testing::zero_lm_resume(Mesh::threads(m), dir.path(), stage, file("zero")), 3);
    }
    // A replicated checkpoint resumes with ZeRO too.
    testing::expect_same_lm_run(testing::zero_lm_resume(Mesh::threads(3), dir.path(), 0, file("replicated")),
                                testing::zero_lm_resume(Mesh::threads(3), dir.path(), stage, file("replicated")), 3);
  }
}

TEST(ZeroLmTrainer, OptionParsing) {
  std::vector<std::string> args = {"train_lm", "--zero", "1"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  lm::ParsedLmOptions p = lm::parse_lm_options(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.options.zero_stage, 1);
  args[2] = "3";
  argv.clear();
  for (std::string& a : args) argv.push_back(a.data());
  p = lm::parse_lm_options(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.options.zero_stage, 3);
  args[2] = "4";
  argv.clear();
  for (std::string& a : args) argv.push_back(a.data());
  p = lm::parse_lm_options(static_cast<int>(argv.size()), argv.data());
  EXPECT_NE(p.error.find("--zero 4"), std::string::npos) << p.error;
}

}  // namespace
}  // namespace fjit
