// Certified language-model runs (issue 30, item 5): an LmTrainer's checkpoints carry the hash
// chain of core/io/state_hash.h, checked at load; lm::verify_lm_interval re-executes an
// interval bit for bit, and finds a single-bit flip injected into one replica's gradient
// (parallel/train/train_step_testing.h) at the step it happened.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/io/state_hash.h"
#include "parallel/lm/lm_verify.h"
#include "parallel/train/train_step_testing.h"
#include "tests/test_util.h"
#include "tests/tiny_lm.h"

namespace fjit::lm {
namespace {

namespace fs = std::filesystem;

struct LmRun {
  fs::path dir;
  LmOptions options;
};

LmRun make_run(const std::string& name) {
  LmRun r;
  r.dir = fs::temp_directory_path() / ("fjit_lm_verify_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(r.dir);
  fs::create_directories(r.dir);
  r.options = testing::tiny_lm_options(r.dir, 6);
  r.options.checkpoint_every = 2;
  return r;
}

LmTrainerFactory factory(const LmRun& r, int replicas) {
  LmOptions o = r.options;
  o.checkpoint_dir.clear();
  o.token_file = (r.dir / "ckpt" / "corpus.tokens").string();
  return [o, replicas] { return std::make_unique<LmTrainer>(Mesh::threads(replicas), o); };
}

struct FlipGuard {
  explicit FlipGuard(training::testing::GradientFlip f) { training::testing::gradient_flip() = f; }
  ~FlipGuard() { training::testing::gradient_flip().reset(); }
};

TEST(LmVerify, CheckpointsChainAndAnIntervalReExecutesBitForBit) {
  const LmRun r = make_run("clean");
  LmTrainer(Mesh::threads(2), r.options).run();
  const auto ckpts = training::list_checkpoints(r.options.checkpoint_dir);
  ASSERT_EQ(ckpts.size(), 3u);
  const io::Checkpoint c2 = io::load_checkpoint(ckpts[0].second), c4 = io::load_checkpoint(ckpts[1].second);
  EXPECT_EQ(c2.metadata.at(io::kChainPrevKey), io::kChainStart);
  EXPECT_EQ(c4.metadata.at(io::kChainPrevKey), c2.metadata.at(io::kChainKey));
  EXPECT_EQ(c4.metadata.at(io::kStateHashKey), io::state_hash(c4.tensors));
  EXPECT_EQ(c4.metadata.at("replicas"), "2");
  const training::VerifyResult ok = verify_lm_interval(ckpts[0].second, ckpts[1].second, factory(r, 2));
  EXPECT_TRUE(ok.identical) << ok.summary;
  EXPECT_EQ(ok.first_diverging_step, -1);
  EXPECT_EQ(ok.from_step, 2);
  EXPECT_EQ(ok.to_step, 4);
  // Skipping a link of the chain is refused, naming the file.
  const std::string skip = fjit::testing::error_of([&] {
    (void)verify_lm_interval(ckpts[0].second, ckpts[2].second, factory(r, 2));
  });
  EXPECT_NE(skip.find(ckpts[2].second + ": its chain does not continue"), std::string::npos) << skip;
  // A tensor changed by someone who then rewrote the file (and its checksum) breaks the chain
  // at load.
  io::Checkpoint forged = c4;
  forged.tensors[0].second.data<float>()[0] += 1.0f;
  io::save_checkpoint(c4.path, forged);
  LmTrainer t(Mesh::threads(2), factory(r, 2)()->options());
  const std::string error = fjit::testing::error_of([&] { t.load(c4.path); });
  EXPECT_NE(error.find(c4.path + ": fjit.state_sha256 is "), std::string::npos) << error;
  fs::remove_all(r.dir);
}

TEST(LmVerify, FindsABitFlippedInOneReplicasGradient) {
  const LmRun r = make_run("flip");
  {
    FlipGuard flip({.step = 3, .replica = 1, .param = "norm/b"});
    LmTrainer(Mesh::threads(3), r.options).run();
  }
  const auto ckpts = training::list_checkpoints(r.options.checkpoint_dir);
  ASSERT_EQ(ckpts.size(), 3u);
  const training::VerifyResult bad = verify_lm_interval(ckpts[0].second, ckpts[1].second, factory(r, 3));
  EXPECT_FALSE(bad.identical);
  EXPECT_EQ(bad.first_diverging_step, 3) << bad.summary;
  EXPECT_FALSE(bad.first_diverging_tensor.empty()) << bad.summary;
  EXPECT_NE(bad.summary.find("first diverging step 3"), std::string::npos) << bad.summary;
  // The interval after it started from the corrupted state, and computed it correctly.
  const training::VerifyResult next = verify_lm_interval(ckpts[1].second, ckpts[2].second, factory(r, 3));
  EXPECT_TRUE(next.identical) << next.summary;
  fs::remove_all(r.dir);
}

// A train_lm run rebuilt from its checkpoint alone (what fjit_verify does): the options parsed
// from a command line, as lm_main parses them, recorded in every checkpoint; the rebuilt run
// finds the flip at its step, confirms the next interval, and the refusals name the file.
TEST(LmVerify, TheRunIsRebuiltFromItsRecordedCommandLine) {
  const LmRun r = make_run("cmdline");
  const std::string ckpt_dir = (r.dir / "ckpt").string();
  const LmOptions options = fjit::testing::tiny_train_lm_options(r.dir, 6);
  {
    FlipGuard flip({.step = 3, .replica = 1, .param = "norm/b"});
    LmTrainer(Mesh::threads(3), options).run();
  }
  const auto ckpts = training::list_checkpoints(ckpt_dir);
  ASSERT_EQ(ckpts.size(), 3u);
  const io::Checkpoint c2 = io::load_checkpoint(ckpts[0].second);
  EXPECT_EQ(io::metadata_str(c2, "format"), kLmCheckpointFormat);
  EXPECT_EQ(io::metadata_str(c2, "command_line").substr(0, 13), "--context\n16\n");
  testing::expect_flip_found_in_first_interval(ckpts);
  // A checkpoint without a command line (a run not started by train_lm), or of another trainer.
  io::Checkpoint bare = c2;
  bare.metadata.erase("command_line");
  const std::string bare_path = (r.dir / "bare.safetensors").string();
  io::save_checkpoint(bare_path, bare);
  const std::string no_line = fjit::testing::error_of([&] { (void)lm_trainer_factory_of(bare_path); });
  EXPECT_NE(no_line.find(bare_path + ": records no command line"), std::string::npos) << no_line;
  bare.metadata["format"] = "fjit-mlp-classifier-v1";
  io::save_checkpoint(bare_path, bare);
  const std::string other = fjit::testing::error_of([&] { (void)lm_trainer_factory_of(bare_path); });
  EXPECT_NE(other.find(bare_path + ": not a checkpoint of the language-model trainer (format "
                       "'fjit-mlp-classifier-v1'"), std::string::npos) << other;
  fs::remove_all(r.dir);
}

}  // namespace
}  // namespace fjit::lm
