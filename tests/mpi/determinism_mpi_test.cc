// Placement does not change the bits (README: reproducibility), under mpiexec (-n 2 and -n 3):
// the example models trained with one replica per rank and one intra-op thread each end with
// the parameters and optimizer state of the same job on as many thread replicas in one
// process with two intra-op threads each.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <random>

#include "lib/trainer.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"

namespace fjit::examples {
namespace {

using testing::expect_bit_equal;

using namespace fjit::training;  // the trainer; Trainer itself is lib/trainer.h's

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

using fjit::testing::synthetic_images;

class PlacementDeterminism : public ::testing::TestWithParam<const char*> {};

TEST_P(PlacementDeterminism, RanksWithOneThreadMatchThreadReplicasWithTwo) {
  ASSERT_EQ(mesh().intra_op_threads(), 1);
  TrainOptions o;
  o.model = GetParam();
  o.layers = {784, 512, 512, 10};
  o.batch_size = 96;  // 48 or 32 rows per replica
  o.dropout = o.model == "mlp" ? 0.0 : 0.1;
  o.seed = 4;
  o.log_every = 0;
  o.epochs = 10;
  const io::Dataset data = synthetic_images(2 * o.batch_size, 21);
  Trainer ranks(mesh(), o, data);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(ranks.step().has_value());
  if (!mesh().is_primary()) return;
  setenv("FJIT_INTRA_OP_THREADS", "2", 1);
  Trainer threads(Mesh::threads(mesh().size()), o, data);
  unsetenv("FJIT_INTRA_OP_THREADS");
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(threads.step().has_value());
  expect_bit_equal(ranks.params(), threads.params(), o.model + " parameters");
  expect_bit_equal(ranks.optimizer_state(), threads.optimizer_state(), o.model + " optimizer state");
}

// FJIT_OVERLAP=1 after MPI started at MPI_THREAD_FUNNELED: the ranks' plans place their
// all-reduces early and run them on the plan's thread (no worker may call MPI); the values
// stay those of the plain plan.
TEST_P(PlacementDeterminism, OverlappedRanksMatchPlainThreadReplicas) {
  ASSERT_FALSE(mesh().comm(0).callable_from_any_thread());
  TrainOptions o;
  o.model = GetParam();
  o.layers = {784, 256, 10};
  o.batch_size = 48;
  o.dropout = o.model == "mlp" ? 0.0 : 0.1;
  o.seed = 5;
  o.log_every = 0;
  const io::Dataset data = synthetic_images(2 * o.batch_size, 22);
  setenv("FJIT_OVERLAP", "1", 1);
  Trainer ranks(mesh(), o, data);
  unsetenv("FJIT_OVERLAP");
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(ranks.step().has_value());
  if (!mesh().is_primary()) return;
  Trainer threads(Mesh::threads(mesh().size()), o, data);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(threads.step().has_value());
  expect_bit_equal(ranks.params(), threads.params(), o.model + " parameters");
  expect_bit_equal(ranks.optimizer_state(), threads.optimizer_state(), o.model + " optimizer state");
}

INSTANTIATE_TEST_SUITE_P(Models, PlacementDeterminism, ::testing::Values("mlp", "cnn"));

}  // namespace
}  // namespace fjit::examples

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  setenv("FJIT_INTRA_OP_THREADS", "1", 1);
  fjit::examples::mesh();  // initialises MPI, one intra-op thread per rank
  unsetenv("FJIT_INTRA_OP_THREADS");
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::examples::mesh().is_primary());
}
