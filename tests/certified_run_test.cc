// Certified runs (issue 30, item 5) with thread replicas: every checkpoint carries a SHA-256
// of its state chained to the previous checkpoint's, verified at load; verify_interval (what
// fjit_verify runs) re-executes an interval bit-identically, and finds a single-bit flip
// injected into one replica's gradient (train_step_testing.h), naming the step it happened at
// and a tensor it reached.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "core/io/state_hash.h"
#include "lib/trainer.h"
#include "parallel/train/train_step_testing.h"
#include "parallel/train/verify.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"

namespace fjit::examples {
namespace {

using fjit::testing::error_of;
using fjit::testing::fixture;
using training::TrainOptions;
namespace fs = std::filesystem;

TrainOptions run_options(const fs::path& dir, int64_t steps) {
  TrainOptions o;
  o.batch_size = 8;  // 2 batches per epoch of the 16-example fixture
  o.epochs = 100;
  o.max_steps = steps;
  o.seed = 5;
  o.log_every = 0;
  o.eval_batch_size = 8;
  o.checkpoint_dir = dir.string();
  o.checkpoint_every = 2;
  return o;
}

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("fjit_certified_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

training::TrainerFactory factory(int replicas) {
  return [replicas] {
    TrainOptions o = run_options("", 1000);
    o.checkpoint_dir.clear();
    return std::make_unique<Trainer>(Mesh::threads(replicas), o, fixture());
  };
}

struct FlipGuard {
  explicit FlipGuard(training::testing::GradientFlip f) { training::testing::gradient_flip() = f; }
  ~FlipGuard() { training::testing::gradient_flip().reset(); }
};

TEST(CertifiedRun, CheckpointsFormAVerifiedHashChain) {
  const fs::path dir = fresh_dir("chain");
  Trainer(Mesh::threads(2), run_options(dir, 4), fixture(), fixture()).run();
  const io::Checkpoint c2 = io::load_checkpoint(io::checkpoint_path(dir.string(), 2));
  const io::Checkpoint c4 = io::load_checkpoint(io::checkpoint_path(dir.string(), 4));
  EXPECT_EQ(c2.metadata.at(io::kChainPrevKey), io::kChainStart);
  EXPECT_EQ(c4.metadata.at(io::kChainPrevKey), c2.metadata.at(io::kChainKey));
  EXPECT_EQ(c2.metadata.at(io::kStateHashKey), io::state_hash(c2.tensors));
  EXPECT_EQ(c4.metadata.at(io::kStateHashKey).size(), 64u);
  EXPECT_NE(c4.metadata.at(io::kStateHashKey), c2.metadata.at(io::kStateHashKey));
  // A tensor changed by someone who then rewrote the file (and so its checksum) breaks the chain.
  io::Checkpoint forged = c4;
  forged.tensors[0].second.data<float>()[0] += 1.0f;
  io::save_checkpoint(c4.path, forged);
  Trainer t(Mesh::threads(2), run_options(dir, 8), fixture());
  EXPECT_NE(error_of([&] { t.load(c4.path); }).find(c4.path + ": fjit.state_sha256 is "),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(CertifiedRun, VerifyConfirmsACleanRunBitForBit) {
  const fs::path dir = fresh_dir("clean");
  Trainer(Mesh::threads(2), run_options(dir, 4), fixture(), fixture()).run();
  const training::VerifyResult r = training::verify_interval(
      io::checkpoint_path(dir.string(), 2), io::checkpoint_path(dir.string(), 4), factory(2));
  EXPECT_TRUE(r.identical) << r.summary;
  EXPECT_EQ(r.first_diverging_step, -1);
  EXPECT_EQ(r.from_step, 2);
  EXPECT_EQ(r.to_step, 4);
  fs::remove_all(dir);
}

TEST(CertifiedRun, VerifyFindsABitFlippedInOneReplicasGradient) {
  const fs::path dir = fresh_dir("flip");
  {
    FlipGuard flip({.step = 3, .replica = 1, .param = "b3"});
    Trainer(Mesh::threads(3), run_options(dir, 6), fixture(), fixture()).run();
  }
  const auto ckpts = training::list_checkpoints(dir.string());
  ASSERT_EQ(ckpts.size(), 3u);
  const training::VerifyResult bad = training::verify_interval(ckpts[0].second, ckpts[1].second, factory(3));
  EXPECT_FALSE(bad.identical);
  EXPECT_EQ(bad.first_diverging_step, 3) << bad.summary;
  EXPECT_FALSE(bad.first_diverging_tensor.empty()) << bad.summary;
  EXPECT_NE(bad.summary.find("first diverging step 3"), std::string::npos) << bad.summary;
  // The interval after it started from the corrupted state, and computed it correctly.
  const training::VerifyResult next = training::verify_interval(ckpts[1].second, ckpts[2].second, factory(3));
  EXPECT_TRUE(next.identical) << next.summary;
  fs::remove_all(dir);
}

// The sentinel: nothing raised on a clean run (every step recomputed, K = 1), and the flip named
// on the replica that recomputed the flipped share, at the step it happened.
TEST(CertifiedRun, SentinelIsQuietOnACleanRun) {
  TrainOptions o = run_options("", 4);
  o.checkpoint_dir.clear();
  o.sentinel_every = 1;
  Trainer t(Mesh::threads(2), o, fixture());
  for (int i = 0; i < 4; ++i) ASSERT_NO_THROW(t.step());
  // The sentinel changes nothing of what the step computes.
  TrainOptions plain = o;
  plain.sentinel_every = 0;
  Trainer u(Mesh::threads(2), plain, fixture());
  for (int i = 0; i < 4; ++i) u.step();
  fjit::testing::expect_bit_equal(t.params(), u.params(), "param");
}

TEST(CertifiedRun, SentinelNamesTheReplicaWhoseGradientFlipped) {
  FlipGuard flip({.step = 3, .replica = 1, .param = "b3"});
  TrainOptions o = run_options("", 6);
  o.checkpoint_dir.clear();
  o.sentinel_every = 2;  // step indices 0, 2, 4: the flip's step 3 has index 2
  o.batch_size = 9;      // equal shards of 3 rows: the sentinel gathers them
  Trainer t(Mesh::threads(3), o, fixture());
  t.step();
  t.step();
  std::string error;
  try {
    t.step();
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("sentinel: at step index 2, replica 1's gradient"), std::string::npos) << error;
  EXPECT_NE(error.find("differs from replica 0's recomputation"), std::string::npos) << error;
  EXPECT_EQ(t.steps_done(), 3);
}

// The sentinel on shares of real size (the MLP at 64 rows a replica, as the example's batch of
// 128 on 2 replicas; the CNN with dropout, so each replica's key matters), every step checked:
// nothing raised, and the parameters are those of the same run without the sentinel.
class SentinelModels : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(SentinelModels, QuietOnEveryStepOfACleanRun) {
  const std::string model = std::get<0>(GetParam());
  const int replicas = std::get<1>(GetParam());
  TrainOptions o;
  o.model = model;
  o.dropout = model == "mlp" ? 0.0 : 0.1;
  o.batch_size = (model == "mlp" ? 64 : 16) * replicas;
  o.seed = 3;
  o.log_every = 0;
  o.epochs = 10;
  o.sentinel_every = 1;
  const int steps = model == "mlp" ? 12 : 4;
  const io::Dataset data = fjit::testing::synthetic_images(4 * o.batch_size, 7);
  Trainer t(Mesh::threads(replicas), o, data);
  for (int i = 0; i < steps; ++i) ASSERT_TRUE(t.step().has_value());
  TrainOptions plain = o;
  plain.sentinel_every = 0;
  Trainer u(Mesh::threads(replicas), plain, data);
  for (int i = 0; i < steps; ++i) ASSERT_TRUE(u.step().has_value());
  fjit::testing::expect_bit_equal(t.params(), u.params(), model + " parameters");
}

INSTANTIATE_TEST_SUITE_P(Models, SentinelModels,
                         ::testing::Combine(::testing::Values("mlp", "cnn"), ::testing::Values(2, 3)));

TEST(CertifiedRun, SentinelRefusesSharesOfDifferentSizes) {
  TrainOptions o = run_options("", 4);
  o.checkpoint_dir.clear();
  o.sentinel_every = 10;
  o.batch_size = 8;  // 3, 3 and 2 rows on 3 replicas
  std::string error;
  try {
    Trainer(Mesh::threads(3), o, fixture());
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("a global batch of 8 does not split evenly over 3 replicas (shares of 3, 3 and 2 rows)"),
            std::string::npos) << error;
}

// The sentinel's check has a kind of its own, kept whatever the check mode: with checks off
// (no user check, no automatic check), `sentinel_every` still names the flipped replica and
// the step, and the report labels it as the sentinel's.
TEST(CertifiedRun, SentinelStaysOnWithChecksOff) {
  FlipGuard flip({.step = 2, .replica = 1, .param = "b3"});
  TrainOptions o = run_options("", 6);
  o.checkpoint_dir.clear();
  o.checks = CheckMode::off;
  o.sentinel_every = 1;
  o.batch_size = 6;  // equal shards of 3 rows on 2 replicas
  Trainer t(Mesh::threads(2), o, fixture());
  t.step();
  std::string error;
  try {
    t.step();
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("sentinel: at step index 1, replica 1's gradient"), std::string::npos) << error;
  EXPECT_NE(error.find("differs from replica 0's recomputation"), std::string::npos) << error;
  EXPECT_NE(error.find("sentinel check at "), std::string::npos) << error;
  EXPECT_EQ(t.steps_done(), 2);  // the failed step counts, as in the test above
  // Without the sentinel, checks off lets the same flip through unseen.
  TrainOptions plain = o;
  plain.sentinel_every = 0;
  Trainer u(Mesh::threads(2), plain, fixture());
  for (int i = 0; i < 3; ++i) EXPECT_NO_THROW(u.step());
}

}  // namespace
}  // namespace fjit::examples
