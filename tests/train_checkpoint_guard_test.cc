// A trainer that fails early and checkpoints that cannot lie (issue 30, item 8), through the
// examples' trainer as an operator runs it: a step edited into a checkpoint with sed, a forged
// header whose checksum was recomputed (caught by the cross-check with the state tensors), a
// --checkpoint-dir under a regular file (refused before the first step), and an MLP checkpoint
// resumed as a cnn (refused naming both models).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lib/trainer.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"

namespace fjit::examples {
namespace {

using fjit::testing::error_of;
using fjit::testing::fixture;
using training::TrainOptions;
namespace fs = std::filesystem;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TrainOptions small_options(const fs::path& dir) {
  TrainOptions o;
  o.batch_size = 8;  // 2 batches per epoch of the 16-example fixture
  o.epochs = 100;
  o.max_steps = 3;
  o.seed = 3;
  o.log_every = 0;
  o.eval_batch_size = 8;
  o.checkpoint_dir = dir.string();
  return o;
}

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("fjit_ckpt_guard_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

// Trains 3 steps into `dir`; returns the last checkpoint's path (step 3: epoch 1, batch 1).
std::string trained(const fs::path& dir) {
  Trainer first(Mesh::threads(2), small_options(dir), fixture(), fixture());
  first.run();
  return io::checkpoint_path(dir.string(), 3);
}

void sed(const std::string& path, const std::string& from, const std::string& to) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  bytes.replace(at, from.size(), to);
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(TrainCheckpointGuard, SedEditedStepIsRefusedAtResume) {
  const fs::path dir = fresh_dir("sed");
  const std::string path = trained(dir);
  sed(path, R"("step":"3")", R"("step":"8")");
  TrainOptions o = small_options(dir);
  o.resume = true;
  o.max_steps = 10;
  Trainer resumed(Mesh::threads(2), o, fixture(), fixture());
  const std::string error = error_of([&] { resumed.run(); });
  EXPECT_EQ(error.rfind(path + ": checksum mismatch: metadata fjit.checksum is ", 0), 0u) << error;
  EXPECT_EQ(resumed.steps_done(), 0) << "nothing trained from the wrong place";
  fs::remove_all(dir);
}

TEST(TrainCheckpointGuard, ForgedHeaderWithRecomputedChecksumFailsTheCrossCheck) {
  const fs::path dir = fresh_dir("forged");
  const std::string path = trained(dir);
  io::Checkpoint ck = io::load_checkpoint(path);
  ASSERT_NE(ck.find("opt/step"), nullptr);
  EXPECT_EQ(ck.find("opt/step")->item<int32_t>(), 3) << "the oracle: 3 updates";
  TrainOptions o = small_options(dir);

  ck.metadata["step"] = "5";  // epoch 1 batch 1 is step 3
  io::save_checkpoint(path, ck);
  Trainer a(Mesh::threads(2), o, fixture());
  EXPECT_EQ(error_of([&] { a.load(path); }),
            path + ": the header says step 5 but epoch 1 batch 1 (of 2 batches per epoch) is "
                   "step 3: the header contradicts itself");

  ck.metadata["epoch"] = "2";  // consistent position, but the state made 3 updates
  io::save_checkpoint(path, ck);
  Trainer b(Mesh::threads(2), o, fixture());
  EXPECT_EQ(error_of([&] { b.load(path); }),
            path + ": the header says step 5 (0 of them skipped, so 5 updates) but the tensor "
                   "opt/step counts 3 updates: header and state disagree");
  EXPECT_EQ(b.steps_done(), 0);
  fs::remove_all(dir);
}

TEST(TrainCheckpointGuard, RemovedChecksumEntryIsRefusedAtResume) {
  const fs::path dir = fresh_dir("nocrc");
  const std::string path = trained(dir);
  const io::Checkpoint ck = io::load_checkpoint(path);
  const std::string entry = std::string(",\"fjit.checksum\":\"") + ck.metadata.at("fjit.checksum") + "\"";
  sed(path, entry, std::string(entry.size(), ' '));
  Trainer t(Mesh::threads(2), small_options(dir), fixture());
  EXPECT_CONTAINS(error_of([&] { t.load(path); }),
                  path + ": has no fjit.checksum entry (removed, or not written by fjit)");
  fs::remove_all(dir);
}

TEST(TrainCheckpointGuard, CheckpointDirUnderARegularFileFailsBeforeTheFirstStep) {
  const fs::path dir = fresh_dir("file");
  fs::create_directories(dir);
  const std::string file = (dir / "plain").string();
  std::ofstream(file) << "x";
  TrainOptions o = small_options(file + "/ckpts");
  Trainer t(Mesh::threads(2), o, fixture(), fixture());
  EXPECT_EQ(error_of([&] { t.run(); }),
            "--checkpoint-dir " + file + "/ckpts: " + file +
                " is a regular file, not a directory: cannot create the directory under it");
  EXPECT_EQ(t.steps_done(), 0);
  o.checkpoint_dir = (dir / "ok").string();
  o.log_dir = file + "/logs";
  Trainer u(Mesh::threads(2), o, fixture(), fixture());
  EXPECT_CONTAINS(error_of([&] { u.run(); }), "--log-dir " + file + "/logs: ");
  EXPECT_EQ(u.steps_done(), 0);
  fs::remove_all(dir);
}

TEST(TrainCheckpointGuard, MlpCheckpointResumedAsCnnIsRefusedNamingBoth) {
  const fs::path dir = fresh_dir("model");
  const std::string path = trained(dir);
  TrainOptions o = small_options(dir);
  o.model = "cnn";
  Trainer cnn(Mesh::threads(2), o, fixture());
  EXPECT_EQ(error_of([&] { cnn.load(path); }),
            path + ": the checkpoint holds model mlp 784,512,256,10, this run's is cnn dropout 0: "
                   "it cannot be resumed with another model");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fjit::examples
