// DP-SGD (examples/lib/dp_sgd.h) under mpiexec (-n 2 and -n 3): one replica per rank ends
// with the parameters, bit for bit, of the same steps on as many thread replicas in one
// process, and of one replica alone (the clipped sum is exact and the noise is drawn once
// for the global batch).
#include <gtest/gtest.h>
#include <mpi.h>

#include "tests/dpsgd_testing.h"
#include "tests/fixture_data.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

TEST(DpSgdMpi, RanksMatchThreadReplicasAndOneReplica) {
  const io::Dataset data = testing::synthetic_images(96, 8);
  const testing::DpRun run;
  const ArrayDict ranks = testing::train_dp(mesh(), data, run);
  if (!mesh().is_primary()) return;
  testing::expect_bit_equal(ranks, testing::train_dp(Mesh::threads(mesh().size()), data, run),
                            "thread replicas");
  testing::expect_bit_equal(ranks, testing::train_dp(Mesh::threads(1), data, run), "one replica");
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::mesh();
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::mesh().is_primary());
}
