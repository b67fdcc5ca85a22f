// One timeline for a whole MPI job (run under mpiexec -n 2 and -n 3): every rank's clock is
// made to read a known amount late (the timeline's test seam, set before the mesh aligns the
// clocks), the offset estimate lies within its error bound of that skew, and the merged trace
// of a few psum steps has one track per rank on which every rank's collective ends after
// every rank's arrival at it, up to the stated error bounds.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/base/timeline.h"
#include "core/base/timeline_merge.h"
#include "core/base/timeline_testing.h"
#include "fjit.h"
#include "nlohmann/json.hpp"
#include "parallel/clock_sync.h"
#include "parallel/mpi_runtime.h"
#include "tests/mpi/mpi_test_main.h"

namespace fjit {
namespace {

// Rank r's clock reads r * kSkewPerRank ns late: the true offset against rank 0 is -r * it.
constexpr int64_t kSkewPerRank = 3'700'000'123;

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

TEST(TimelineMpi, OffsetEstimateIsWithinItsErrorBoundOfTheInjectedSkew) {
  const int rank = mesh().first_replica();
  const int64_t truth = -rank * kSkewPerRank;
  for (int round = 0; round < 3; ++round) {
    const timeline::ClockOffset o = estimate_clock_offset(MPI_COMM_WORLD);
    if (rank == 0) {
      EXPECT_EQ(o.offset_ns, 0);
      EXPECT_EQ(o.error_ns, 0);
      continue;
    }
    EXPECT_LE(std::abs(o.offset_ns - truth), o.error_ns)
        << "rank " << rank << ": estimate " << o.offset_ns << " +- " << o.error_ns;
    EXPECT_GT(o.error_ns, 0);
    EXPECT_LT(o.error_ns, kSkewPerRank / 2) << "the bound must tell the ranks' skews apart";
  }
}

struct Span {
  double start, end;
};

// Rank 0's part: merges the ranks' files and checks the merged trace.
void check_merged(const std::vector<std::string>& files, const std::string& merged, int n,
                  int steps) {
  const timeline::MergeResult result = timeline::merge(files, merged);
  EXPECT_EQ(result.files, n);
  EXPECT_EQ(result.replicas, n);
  EXPECT_TRUE(result.aligned);

  std::ifstream in(merged);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["otherData"]["time_base"], "rank 0 clock");
  std::map<int, int64_t> error_ns;
  for (const auto& src : j["otherData"]["sources"]) {
    const int p = src["process"];
    error_ns[p] = src["clock_error_ns"];
    const int64_t offset = src["clock_offset_ns"];
    EXPECT_LE(std::abs(offset + p * kSkewPerRank), error_ns[p]) << src.dump();
  }
  ASSERT_EQ(error_ns.size(), static_cast<size_t>(n));

  std::map<int, std::string> names;
  std::map<int, std::vector<Span>> collectives, waits;
  for (const auto& e : j["traceEvents"]) {
    EXPECT_EQ(e["pid"], e.value("tid", e["pid"].get<int>())) << e.dump();
    if (e["ph"] == "M" && e["name"] == "process_name") names[e["pid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    const Span s{e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    if (e["cat"] == "collective") collectives[e["pid"]].push_back(s);
    if (e["cat"] == "wait") waits[e["pid"]].push_back(s);
  }
  ASSERT_EQ(names.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const std::string want = fmt::format("replica {0} (rank {0}, host ", r);
    EXPECT_EQ(names[r].rfind(want, 0), 0u) << names[r];
    ASSERT_EQ(collectives[r].size(), static_cast<size_t>(steps)) << "one psum a step, rank " << r;
    std::sort(collectives[r].begin(), collectives[r].end(),
              [](const Span& a, const Span& b) { return a.start < b.start; });
  }
  // The k-th psum of every rank ends after every rank arrived at it (an all-reduce needs all
  // inputs), up to both ranks' error bounds; so does a wait inside it.
  int waits_checked = 0;
  for (int k = 0; k < steps; ++k) {
    for (int a = 0; a < n; ++a) {
      const Span& mine = collectives[a][k];
      for (int b = 0; b < n; ++b) {
        const double slack_us = static_cast<double>(error_ns[a] + error_ns[b]) / 1e3 + 1e-3;
        const double arrival = collectives[b][k].start;
        EXPECT_GE(mine.end + slack_us, arrival)
            << "step " << k << ": rank " << a << "'s psum ended before rank " << b << " arrived";
        for (const Span& w : waits[a]) {
          if (w.start < mine.start - 1e-3 || w.end > mine.end + 1e-3) continue;
          EXPECT_GE(w.end + slack_us, arrival) << "step " << k << ", rank " << a << " waiting";
          ++waits_checked;
        }
      }
    }
  }
  EXPECT_GT(waits_checked, 0) << "the stragglers made the others wait";
}

TEST(TimelineMpi, MergedTraceHasOneTrackPerRankAndCollectivesLineUp) {
  const int rank = mesh().first_replica(), n = mesh().size();
  int tag = static_cast<int>(::getpid());
  MPI_Bcast(&tag, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string base = ::testing::TempDir() + "/timeline_mpi_" + std::to_string(tag);
  const std::string path = base + ".json", merged = base + ".merged.json";
  constexpr int kSteps = 6;
  timeline::start(path, /*max_steps=*/kSteps);
  auto f = pmap(mesh(), "i", [](const Tensor& x) { return psum(sum(x * x), "i"); });
  Array x = Array::from_vector<float>({1, 2, 3}, {3});
  for (int s = 0; s < kSteps; ++s) {
    // One straggler a step, so the others wait for it at the psum.
    if (s % n == rank) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    f(x);
  }
  EXPECT_TRUE(timeline::stop());
  MPI_Barrier(MPI_COMM_WORLD);  // every rank's file is written
  std::vector<std::string> files{path};
  for (int r = 1; r < n; ++r) files.push_back(fmt::format("{}.rank{}.json", base, r));
  if (rank == 0) {
    try {  // a throw must not skip the barrier below: the other ranks wait there
      check_merged(files, merged, n, kSteps);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    for (const std::string& file : files) std::remove(file.c_str());
    std::remove(merged.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::mpi_init_once(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Before the mesh: its communicator aligns the clocks as they read with the skew.
  fjit::timeline::testing::set_clock_skew(rank * fjit::kSkewPerRank);
  fjit::mesh();
  return fjit::mpi_testing::run_all_tests_on_ranks(rank == 0);
}
