// ZeRO stages 1 and 2 across MPI ranks (run with 2 and 3 ranks; parallel/train/zero.h): 20 steps of
// the MLP's training step with each rank holding its shard of the optimizer state give
// bit-identical parameters and losses (and gradient norms: stage 1 bit for bit, stage 2 within
// 1e-5) to the replicated step over the same
// ranks and to thread replicas of the same count on this rank; each rank's state is its slice
// of the replicated state and its size is ceil(numel / ranks) per parameter; and the examples'
// MLP trainer with --zero 1 and 2 trains as without it, bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include "tests/mpi/mpi_test_main.h"
#include "tests/zero_testing.h"
#include "tests/zero_trainer_testing.h"

namespace fjit {
namespace {

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

TEST(ZeroMpi, Stages1And2AreBitIdenticalToTheReplicatedStep) {
  const int n = mesh().size();
  for (int64_t rows : {12, 11}) {
    const auto ref = testing::zero_test_run(mesh(), 0, 20, rows);
    for (int stage : {1, 2}) {
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
  for (int stage : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    testing::expect_same_training(ref, testing::zero_trainer_run(mesh(), stage));
  }
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::mesh().first_replica() == 0);
}
