// Certified runs under mpiexec (-n 2 and -n 3 in ctest; any rank count up to 8): a run with one replica per rank, whose last
// rank's gradient has one bit flipped at step 3 (train_step_testing.h), writes checkpoints
// (rank 0) that verify_interval, re-executing with thread replicas in one process, shows to
// diverge at step 3, while the intervals before and after re-execute bit-identically (MPI ranks
// and thread replicas compute the same bits).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "lib/trainer.h"
#include "parallel/train/train_step_testing.h"
#include "parallel/train/verify.h"
#include "tests/fixture_data.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/test_util.h"

namespace fjit::examples {
namespace {

using fjit::testing::fixture;
using training::TrainOptions;

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

TrainOptions run_options(const std::string& dir) {
  TrainOptions o;
  o.batch_size = 8;
  o.epochs = 100;
  o.max_steps = 6;
  o.seed = 5;
  o.log_every = 0;
  o.eval_batch_size = 8;
  o.checkpoint_dir = dir;
  o.checkpoint_every = 2;
  return o;
}

TEST(CertifiedRunMpi, VerifyOnThreadsFindsTheFlipOfOneRank) {
  char dir[256] = {};
  if (mesh().is_primary()) {
    std::string d = (std::filesystem::temp_directory_path() / "fjit_certified_mpi_XXXXXX").string();
    EXPECT_NE(mkdtemp(d.data()), nullptr);
    std::strncpy(dir, d.c_str(), sizeof dir - 1);
  }
  mesh().comm(0).broadcast(dir, sizeof dir, 0);
  const int n = mesh().size();
  training::testing::gradient_flip() = training::testing::GradientFlip{.step = 3, .replica = n - 1, .param = "b3"};
  Trainer(mesh(), run_options(dir), fixture(), fixture()).run();
  training::testing::gradient_flip().reset();
  if (mesh().is_primary()) {
    const auto make = [n] {
      TrainOptions o = run_options("");
      o.max_steps = 1000;
      return std::make_unique<Trainer>(Mesh::threads(n), o, fixture());
    };
    const auto ckpts = training::list_checkpoints(dir);
    EXPECT_EQ(ckpts.size(), 3u);  // not ASSERT: every rank must reach the barrier below
    if (ckpts.size() == 3) {
      const training::VerifyResult bad = training::verify_interval(ckpts[0].second, ckpts[1].second, make);
      EXPECT_FALSE(bad.identical);
      EXPECT_EQ(bad.first_diverging_step, 3) << bad.summary;
      EXPECT_FALSE(bad.first_diverging_tensor.empty()) << bad.summary;
      const training::VerifyResult next = training::verify_interval(ckpts[1].second, ckpts[2].second, make);
      EXPECT_TRUE(next.identical) << next.summary;
    }
    std::filesystem::remove_all(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The sentinel under MPI: the flip on the last rank is named by the rank before it, and every
// rank stops with the same check report.
TEST(CertifiedRunMpi, SentinelNamesTheFlippedRank) {
  const int n = mesh().size();
  // The flip is cleared however the test ends, so that it cannot leak into the next test.
  struct ClearFlip {
    ~ClearFlip() { training::testing::gradient_flip().reset(); }
  } clear_flip;
  training::testing::gradient_flip() = training::testing::GradientFlip{.step = 3, .replica = n - 1, .param = "b3"};
  TrainOptions o = run_options("");
  o.checkpoint_dir.clear();
  o.checkpoint_every = 0;
  o.batch_size = 2 * n;  // equal shards (the sentinel gathers them), within the fixture's 16 rows up to 8 ranks
  o.sentinel_every = 2;  // step indices 0, 2, ...: the flip's step 3 has index 2
  Trainer t(mesh(), o, fixture());
  std::string error;
  try {
    for (int i = 0; i < 4; ++i) t.step();
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("sentinel: at step index 2, replica " + std::to_string(n - 1) + "'s gradient"),
            std::string::npos) << error;
  EXPECT_NE(error.find("differs from replica " + std::to_string(n - 2) + "'s recomputation"),
            std::string::npos) << error;
  EXPECT_EQ(t.steps_done(), 3);
}

// The sentinel on every step of a clean run on ranks, the MLP at 64 rows a rank and the CNN
// with dropout: nothing raised on any rank.
TEST(CertifiedRunMpi, SentinelIsQuietOnEveryStepOfACleanRun) {
  for (const std::string model : {"mlp", "cnn"}) {
    TrainOptions o;
    o.model = model;
    o.dropout = model == "mlp" ? 0.0 : 0.1;
    o.batch_size = (model == "mlp" ? 64 : 16) * mesh().size();
    o.seed = 3;
    o.log_every = 0;
    o.epochs = 10;
    o.sentinel_every = 1;
    Trainer t(mesh(), o, fjit::testing::synthetic_images(4 * o.batch_size, 7));
    for (int i = 0; i < (model == "mlp" ? 12 : 4); ++i) ASSERT_TRUE(t.step().has_value()) << model;
  }
}

}  // namespace
}  // namespace fjit::examples

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::examples::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::examples::mesh().is_primary());
}
