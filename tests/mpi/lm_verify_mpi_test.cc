// Certified language-model runs under mpiexec (-n 2 and -n 3): a train_lm run with one replica
// per rank, whose last rank's gradient has one bit flipped at step 3 (train_step_testing.h),
// writes checkpoints (rank 0) that record its command line; lm::lm_trainer_factory_of rebuilds
// the run from them alone with thread replicas in one process (what fjit_verify does), and
// verify_lm_interval shows the interval holding step 3 to diverge there while the next one
// re-executes bit-identically (MPI ranks and thread replicas compute the same bits).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "parallel/lm/lm_verify.h"
#include "parallel/train/train_step_testing.h"
#include "parallel/train/verify.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/tiny_lm.h"

namespace fjit::lm {
namespace {

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

TEST(LmVerifyMpi, VerifyOnThreadsFindsTheFlipOfOneRank) {
  char dir[256] = {};
  if (mesh().is_primary()) {
    std::string d = (std::filesystem::temp_directory_path() / "fjit_lm_verify_mpi_XXXXXX").string();
    EXPECT_NE(mkdtemp(d.data()), nullptr);
    std::strncpy(dir, d.c_str(), sizeof dir - 1);
    fjit::testing::write_tiny_corpus(dir);
  }
  mesh().comm(0).broadcast(dir, sizeof dir, 0);
  const int n = mesh().size();
  training::testing::gradient_flip() = training::testing::GradientFlip{.step = 3, .replica = n - 1, .param = "norm/b"};
  LmTrainer(mesh(), fjit::testing::tiny_train_lm_options(dir, 2 * n)).run();
  training::testing::gradient_flip().reset();
  if (mesh().is_primary()) {
    const auto ckpts = training::list_checkpoints((std::filesystem::path(dir) / "ckpt").string());
    EXPECT_EQ(ckpts.size(), 3u);  // not ASSERT: every rank must reach the barrier below
    if (ckpts.size() == 3) {
      testing::expect_flip_found_in_first_interval(ckpts);
    }
    std::filesystem::remove_all(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace fjit::lm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::lm::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::lm::mesh().is_primary());
}
