// Loss scaling under mpiexec (-n 2 and -n 3), one replica per rank, on the committed fixture:
// a forced overflow of the f16 gradients is skipped on every rank with parameters and
// optimizer state bit-identical to before it and the scale halved everywhere, and a run whose
// dynamic scale overflows several times equals the same run on thread replicas bit for bit
// (the f16 all-reduce sums in the same rank order on both backends).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>

#include "lib/trainer.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/test_util.h"
#include "tests/fixture_data.h"

namespace fjit::examples {
namespace {

using testing::expect_bit_equal;

using namespace fjit::training;

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

using testing::fixture;  // tests/fixture_data.h

TrainOptions options() {
  TrainOptions o;
  o.batch_size = 8;
  o.epochs = 100;
  o.max_steps = 10;
  o.seed = 5;
  o.log_every = 0;
  o.lr_schedule = "constant";
  o.divergence_check_every = 1;
  o.grad_dtype = "f16";
  o.loss_scale = "dynamic";
  o.loss_scale_growth_interval = 2;
  return o;
}

// Every rank's scale, gathered; expects them equal.
void expect_same_scale_on_every_rank(const Trainer& t) {
  const float mine = t.loss_scale()->scale();
  std::vector<float> all(mesh().size());
  mesh().comm(0).all_gather(&mine, all.data(), sizeof(float));
  for (float s : all) EXPECT_EQ(s, mine);
}

TEST(LossScaleMpi, ForcedOverflowIsSkippedOnEveryRank) {
  Trainer t(mesh(), options(), fixture());
  t.loss_scale()->set_scale(256);
  ASSERT_FALSE(t.step()->skipped);
  const ArrayDict params = testing::deep_copy(t.params()), state = testing::deep_copy(t.optimizer_state());
  t.loss_scale()->set_scale(std::ldexp(1.0, 100));
  EXPECT_TRUE(t.step()->skipped);
  EXPECT_EQ(t.loss_scale()->scale(), static_cast<float>(std::ldexp(1.0, 99)));
  expect_same_scale_on_every_rank(t);
  expect_bit_equal(t.params(), params, "param");
  expect_bit_equal(t.optimizer_state(), state, "optimizer state");
  t.loss_scale()->set_scale(256);
  EXPECT_FALSE(t.step()->skipped);
}

TEST(LossScaleMpi, RunWithOverflowsMatchesThreadReplicas) {
  std::vector<int64_t> skipped;
  Trainer ranks(mesh(), options(), fixture());
  ranks.loss_scale()->set_scale(std::ldexp(1.0, 20));
  while (std::optional<StepStats> s = ranks.step())
    if (s->skipped) skipped.push_back(s->step);
  EXPECT_FALSE(skipped.empty());
  expect_same_scale_on_every_rank(ranks);
  if (mesh().is_primary()) {
    std::vector<int64_t> thread_skipped;
    Trainer threads(Mesh::threads(mesh().size()), options(), fixture());
    threads.loss_scale()->set_scale(std::ldexp(1.0, 20));
    while (std::optional<StepStats> s = threads.step())
      if (s->skipped) thread_skipped.push_back(s->step);
    EXPECT_EQ(thread_skipped, skipped);
    EXPECT_EQ(threads.loss_scale()->state(), ranks.loss_scale()->state());
    expect_bit_equal(ranks.params(), threads.params(), "param");
    expect_bit_equal(ranks.optimizer_state(), threads.optimizer_state(), "optimizer state");
  }
}

}  // namespace
}  // namespace fjit::examples

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::examples::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::examples::mesh().is_primary());
}
