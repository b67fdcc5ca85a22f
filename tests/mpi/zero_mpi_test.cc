// ZeRO stages 1, 2 and 3 across MPI ranks (run with 2 and 3 ranks; parallel/train/zero.h): 20 steps of
// the MLP's training step with each rank holding its shard of the optimizer state give
// bit-identical parameters and losses (and gradient norms: stage 1 bit for bit, stages 2 and 3 within
// 1e-5) to the replicated step over the same
// ranks and to thread replicas of the same count on this rank; each rank's state is its slice
// of the replicated state and its size is ceil(numel / ranks) per parameter; and the examples'
// MLP trainer with --zero 1, 2 and 3 trains as without it, bit for bit. Checkpoints of ZeRO state
// written by the ranks hold the replicated run's tensors and resume on the ranks as the run that
// never stopped; a checkpoint written by another replica count (thread replicas, one more
// than the ranks) resumes on the ranks, resharded, as the replicated ranks resume it; and the
// ranks' checkpoint resumes on thread replicas of another count as the replicated one does.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/mpi/mpi_test_main.h"
#include "tests/test_util.h"
#include "tests/zero_testing.h"
#include "tests/zero_trainer_testing.h"

namespace fjit {
namespace {

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

TEST(ZeroMpi, Stages1To3AreBitIdenticalToTheReplicatedStep) {
  const int n = mesh().size();
  for (int64_t rows : {12, 11}) {
    const auto ref = testing::zero_test_run(mesh(), 0, 20, rows);
    for (int stage : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << n << " ranks, batch " << rows << ", stage " << stage);
      const auto zero = testing::zero_test_run(mesh(), stage, 20, rows);
      testing::expect_same_bits(ref, zero, "zero over ranks", stage == 1);
      testing::expect_state_is_slices(ref.state, zero.state, n, mesh().first_replica(), mesh().local_size());
      EXPECT_EQ(zero.replica_state_bytes, training::zero_state_bytes_per_replica(testing::zero_test_mlp().init(3), n));
      // Thread replicas of the same count on this rank, fed the whole batch, agree bit for bit.
      const auto threads = testing::zero_test_run(Mesh::threads(n), stage, 20, rows);
      testing::expect_same_bits(threads, zero, "zero, ranks vs threads");
    }
  }
}

// The examples' MLP trainer with --zero 1 and 2 over the ranks: the replicated trainer's losses and
// parameters bit for bit.
TEST(ZeroMpi, TrainerIsBitIdentical) {
  const auto ref = testing::zero_trainer_run(mesh(), 0);
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    testing::expect_same_training(ref, testing::zero_trainer_run(mesh(), stage));
  }
}

TEST(ZeroMpi, CheckpointsResumeResharded) {
  const int n = mesh().size(), rank = mesh().first_replica();
  const int64_t batch = testing::zero_resume_options(0, 1).batch_size;
  if (batch % n != 0) GTEST_SKIP() << "a global batch of " << batch << " does not divide over " << n << " ranks";
  // Other replica counts that the batch divides over, either side of n.
  const auto [fewer, more] = testing::dividing_counts_around(n, batch);
  uint64_t pid = static_cast<uint64_t>(::getpid());  // rank 0's: one directory for the job
  mesh().process_comm()->broadcast(&pid, sizeof pid, 0);
  const auto dir = std::filesystem::temp_directory_path() / ("fjit_zero_mpi_" + std::to_string(pid));
  auto file = [&](const std::string& name) { return (dir / (name + ".safetensors")).string(); };
  const std::string replicated = file("replicated");
  testing::zero_train_and_save(mesh(), 0, replicated);
  examples::Trainer straight(mesh(), testing::zero_resume_options(0, 20), testing::fixture());
  testing::ZeroTrainerRun never_stopped;
  while (auto s = straight.step())
    if (straight.steps_done() > 10) never_stopped.losses.push_back(s->loss);
  never_stopped.params = straight.params();
  // Written by `more` thread replicas in each process (its own file; only rank 0's is read).
  const std::string by_threads = file("threads_rank" + std::to_string(rank));
  testing::zero_train_and_save(Mesh::threads(more), 0, by_threads);
  const std::string threads_ckpt = file("threads_rank0");
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << n << " ranks, stage " << stage);
    const std::string path = file("zero" + std::to_string(stage));
    testing::zero_train_and_save(mesh(), stage, path);
    if (rank == 0) testing::expect_same_checkpoint_tensors(replicated, path);
    testing::expect_same_resumed(never_stopped, testing::zero_resume_run(mesh(), stage, path));
    // Saved by `more` replicas, resumed by n ranks: as the replicated ranks resume it.
    testing::expect_same_resumed(testing::zero_resume_run(mesh(), 0, threads_ckpt),
                                 testing::zero_resume_run(mesh(), stage, threads_ckpt));
    // Saved by n ranks, resumed by `fewer` and `more` thread replicas (rank 0, which wrote it).
    if (rank == 0)
      for (int m : {fewer, more})
        if (m > 0)
        testing::expect_same_resumed(testing::zero_resume_run(Mesh::threads(m), 0, replicated),
                                     testing::zero_resume_run(Mesh::threads(m), stage, path));
    mesh().process_comm()->barrier();
  }
  mesh().process_comm()->barrier();
  if (rank == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::mesh().first_replica() == 0);
}
