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
#include "tests/test_util.h"

namespace fjit::examples {
namespace {

using testing::expect_bit_equal;

using namespace fjit::training;  // the trainer; Trainer itself is lib/trainer.h's

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

// Every rank makes the same set from the same seed.
io::Dataset synthetic_images(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pixel(0, 1);
  std::uniform_int_distribution<int32_t> label(0, 9);
  Array images(DType::f32, {n, 784}), labels(DType::i32, {n});
  for (int64_t i = 0; i < images.size(); ++i) images.data<float>()[i] = pixel(rng);
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = label(rng);
  ArrayDict columns;
  columns.set("images", images);
  columns.set("labels", labels);
  return io::Dataset(columns);
}

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
