// Replay across MPI ranks (run under mpiexec -n 2 and -n 3): only rank 1's shard holds a
// negative value, so its log makes a NaN that reaches every rank through a psum. Every rank
// writes its part of the step's bundle; the replay of the parts, thread replicas in one
// process, gives every rank's recorded outputs bit for bit and names rank 1's log, at the
// element the test poisoned (the oracle).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "fjit.h"
#include "parallel/pmap.h"
#include "tests/mpi/mpi_test_main.h"

namespace fjit {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kRows = 4;  // per rank

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}
int rank() { return mesh().first_replica(); }

Tensor step_fn(const Params& p, const Tensor& x) {
  Tensor local = sum(log(x * p["w"]));
  Tensor total = psum(local, "batch");
  check(isfinite(total), "total {} is not finite", total);
  return total;
}

// A directory every rank names alike: rank 0's pid.
std::string shared_dir() {
  long pid = static_cast<long>(::getpid());
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return (fs::temp_directory_path() / ("fjit_replay_mpi_" + std::to_string(pid))).string();
}

TEST(ReplayMpi, ANanFromRankOneThroughAPsumIsTracedToRankOne) {
  const std::string dir = shared_dir();
  if (rank() == 0) fs::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  set_check_dump_options({dir, 8});
  PmapOptions o;
  o.jit.checks = CheckMode::user;
  o.jit.policy = CheckPolicy::log;
  auto step = pmap(
      mesh(), "batch", [](const Params& p, const Tensor& x) { return std::tuple{step_fn(p, x)}; },
      o);
  ArrayDict w;
  w.set("w", Array::from_vector(std::vector<float>{1.0f, 2.0f, 0.5f}));
  const ArrayDict p = mesh().replicate(w);
  std::vector<float> v(kRows * 3);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = 0.5f + 0.25f * static_cast<float>((i + 3 * rank()) % 7);
  if (rank() == 1) v[2 * 3 + 1] = -3.0f;  // row 2, column 1
  auto [total] = step(p, Array::from_vector(v, {kRows, 3}));
  EXPECT_TRUE(std::isnan(total.item<float>())) << "the NaN reached rank " << rank();
  set_check_dump_options({});
  MPI_Barrier(MPI_COMM_WORLD);  // every part written
  if (rank() == 0) {
    const int n = mesh().size();
    for (int k = 0; k < n; ++k)
      EXPECT_TRUE(fs::is_directory(dir + "/step0_replica" + std::to_string(k))) << k;
    const ReplayResult r = replay(dir + "/step0_replica0", step.function());
    std::printf("%s", r.text.c_str());
    EXPECT_EQ(r.replicas_replayed, n) << r.text;
    EXPECT_TRUE(r.outputs_compared);
    EXPECT_TRUE(r.output_mismatches.empty()) << "MPI's psum and the replay's agree bit for bit\n"
                                             << r.text;
    ASSERT_TRUE(r.found) << r.text;
    EXPECT_EQ(r.op, "log") << r.text;
    EXPECT_EQ(r.replica, 1) << r.text;
    EXPECT_EQ(r.index, (std::vector<int64_t>{2, 1})) << r.text;
    EXPECT_NE(r.site.find("replay_mpi_test.cc"), std::string::npos) << r.site;
    fs::remove_all(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  setenv("FJIT_STALL_ABORT_S", "60", 0);
  fjit::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::rank() == 0);
}
