// The language-model trainer with --zero 1, 2 and 3 across MPI ranks (run with 2 and 3 ranks;
// parallel/lm/lm_trainer.h): six steps give the replicated ranks' losses, gradient norms,
// parameters and (gathered) optimizer state bit for bit; the ranks' checkpoint holds the
// replicated ranks' tensors; it resumes on the ranks as the run that never stopped, and on
// thread replicas of another count as the replicated trainer resumes it there.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/mpi/mpi_test_main.h"
#include "tests/zero_lm_testing.h"

namespace fjit {
namespace {

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

TEST(ZeroLmMpi, TrainerIsBitIdenticalAndResumesResharded) {
  const int n = mesh().size(), rank = mesh().first_replica();
  const int64_t batch = testing::zero_lm_options("", 0, 1).batch_size;
  if (batch < n) GTEST_SKIP() << "a global batch of " << batch << " sequences feeds at most " << batch << " ranks";
  uint64_t pid = static_cast<uint64_t>(::getpid());  // rank 0's: one directory for the job
  mesh().process_comm()->broadcast(&pid, sizeof pid, 0);
  const auto dir = std::filesystem::temp_directory_path() / ("fjit_zero_lm_mpi_" + std::to_string(pid));
  if (rank == 0) std::filesystem::create_directories(dir);
  mesh().process_comm()->barrier();
  auto file = [&](const std::string& name) { return (dir / (name + ".safetensors")).string(); };
  const auto ref = testing::zero_lm_run(mesh(), dir, 0);
  testing::zero_lm_train_and_save(mesh(), dir, 0, file("replicated"));
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    testing::expect_same_lm_run(ref, testing::zero_lm_run(mesh(), dir, stage), 6);
    testing::zero_lm_train_and_save(mesh(), dir, stage, file("zero"));
    if (rank == 0) testing::expect_same_lm_checkpoint_tensors(file("replicated"), file("zero"));
    const auto resumed = testing::zero_lm_resume(mesh(), dir, stage, file("zero"));
    ASSERT_EQ(resumed.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(ref.losses[i + 3], resumed.losses[i]) << "step " << i + 3;
    for (const auto& [name, p] : ref.params) EXPECT_TRUE(p.bit_equal(resumed.params.at(name))) << name;
    // Resumed by n - 1 and n + 1 thread replicas (rank 0, which can read the file).
    if (rank == 0)
      for (int m : {n - 1, n + 1})
        if (m <= batch)
          testing::expect_same_lm_run(testing::zero_lm_resume(Mesh::threads(m), dir, 0, file("replicated")),
                                      testing::zero_lm_resume(Mesh::threads(m), dir, stage, file("zero")), 3);
    mesh().process_comm()->barrier();
  }
  if (rank == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::mesh().first_replica() == 0);
}
