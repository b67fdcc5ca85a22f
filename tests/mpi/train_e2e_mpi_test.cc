// End to end under mpiexec (-n 2 and -n 3): the trainer of parallel/train (the examples'
// models) with one replica per rank on the committed 16-example fixture. The loss falls, every
// rank holds bitwise-identical parameters (fingerprints compared across ranks, and the divergence check
// every step), a run resumed from a checkpoint that rank 0 wrote reproduces the uninterrupted
// run bit for bit, and the MPI run equals the same run on thread replicas.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "lib/trainer.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/test_util.h"
#include "tests/fixture_data.h"

namespace fjit::examples {
namespace {

using testing::expect_bit_equal;

using namespace fjit::training;  // the trainer; Trainer itself is lib/trainer.h's

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

using testing::fixture;  // tests/fixture_data.h

TrainOptions small_options() {
  TrainOptions o;
  // Over 3 ranks, shards of 3, 3 and 2 rows (pmean weights them). A shard of as many rows as
  // there are ranks makes the batch mean's 1/rows constant equal pmean's 1/ranks, so CSE
  // merges them on some ranks only: the programs still match (pmap's fingerprint ignores
  // constants).
  o.batch_size = 8;
  o.epochs = 100;
  o.max_steps = 6;
  o.seed = 5;
  o.log_every = 0;
  o.divergence_check_every = 1;
  return o;
}

std::vector<float> train_steps(Trainer& t, int steps) {
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i)
    if (std::optional<StepStats> s = t.step()) losses.push_back(s->loss);
  return losses;
}

// Every rank's fingerprint of every parameter and state tensor; expects them all equal.
void expect_same_on_every_rank(const Trainer& t) {
  std::vector<uint64_t> mine;
  for (const auto& kv : t.params()) mine.push_back(data_fingerprint(kv.second));
  for (const auto& kv : t.optimizer_state()) mine.push_back(data_fingerprint(kv.second));
  const int n = mesh().size();
  std::vector<uint64_t> all(mine.size() * n);
  mesh().comm(0).all_gather(mine.data(), all.data(), mine.size() * sizeof(uint64_t));
  for (int r = 1; r < n; ++r)
    for (size_t k = 0; k < mine.size(); ++k)
      EXPECT_EQ(all[r * mine.size() + k], all[k]) << "tensor " << k << " differs on rank " << r;
}

TEST(TrainE2eMpi, LossFallsAndRanksAgree) {
  TrainOptions o = small_options();
  o.max_steps = 8;
  Trainer t(mesh(), o, fixture(), fixture());
  std::vector<float> losses = train_steps(t, 8);
  ASSERT_EQ(losses.size(), 8u);
  EXPECT_LT(losses[6] + losses[7], 0.5f * (losses[0] + losses[1]))
      << "first " << losses[0] << ", " << losses[1] << "; last " << losses[6] << ", " << losses[7];
  expect_same_on_every_rank(t);
  // The losses are all-reduced means: every rank reports the same ones.
  std::vector<float> all(losses.size() * mesh().size());
  mesh().comm(0).all_gather(losses.data(), all.data(), losses.size() * sizeof(float));
  for (int r = 1; r < mesh().size(); ++r)
    for (size_t k = 0; k < losses.size(); ++k) EXPECT_EQ(all[r * losses.size() + k], losses[k]);
  EXPECT_GE(t.evaluate(), 0.75);
}

TEST(TrainE2eMpi, ResumeFromRankZerosCheckpointIsBitExact) {
  const TrainOptions o = small_options();
  Trainer straight(mesh(), o, fixture());
  std::vector<float> all = train_steps(straight, 6);

  // Rank 0 picks the directory; everyone learns its name.
  char dir[256] = {};
  if (mesh().is_primary()) {
    std::string d = (std::filesystem::temp_directory_path() / "fjit_train_e2e_mpi_XXXXXX").string();
    EXPECT_NE(mkdtemp(d.data()), nullptr);
    std::strncpy(dir, d.c_str(), sizeof dir - 1);
  }
  mesh().comm(0).broadcast(dir, sizeof dir, 0);
  const std::string path = std::string(dir) + "/ckpt.safetensors";
  {
    Trainer first(mesh(), o, fixture());
    train_steps(first, 3);
    first.save(path);  // rank 0 writes; the others wait until the file is in place
  }
  Trainer resumed(mesh(), o, fixture());
  resumed.load(path);  // every rank reads the same file
  std::vector<float> tail = train_steps(resumed, 3);
  EXPECT_EQ(tail, std::vector<float>(all.begin() + 3, all.end()));
  expect_bit_equal(resumed.params(), straight.params(), "param");
  expect_bit_equal(resumed.optimizer_state(), straight.optimizer_state(), "optimizer state");
  expect_same_on_every_rank(resumed);
  mesh().comm(0).barrier();
  if (mesh().is_primary()) std::filesystem::remove_all(dir);
}

// The communicator backends reduce in the same order, so N ranks compute exactly what N thread
// replicas compute on the same global batches.
TEST(TrainE2eMpi, RanksMatchThreadReplicas) {
  const TrainOptions o = small_options();
  Trainer ranks(mesh(), o, fixture());
  train_steps(ranks, 6);
  if (mesh().is_primary()) {
    Trainer threads(Mesh::threads(mesh().size()), o, fixture());
    train_steps(threads, 6);
    expect_bit_equal(ranks.params(), threads.params(), "param");
  }
}

}  // namespace
}  // namespace fjit::examples

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::examples::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::examples::mesh().is_primary());
}
