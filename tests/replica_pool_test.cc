// ReplicaPool: every replica runs every step exactly once, errors come back to the caller,
// and the spin-then-sleep hand-off loses no step whether threads spin or sleep between steps.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "parallel/replica_pool.h"

namespace fjit {
namespace {

// Steps back to back (workers catch the next step while spinning) and with pauses longer than
// the spin window (workers are asleep when it starts): each replica must see every step once.
void run_steps(ReplicaPool& pool, int steps, std::chrono::nanoseconds pause) {
  const int n = pool.size();
  std::vector<std::atomic<int>> count(n);
  std::vector<int> last(n, -1);
  for (int s = 0; s < steps; ++s) {
    pool.run([&](int r) {
      EXPECT_EQ(last[r], s - 1) << "replica " << r << " skipped or repeated a step";
      last[r] = s;
      count[r].fetch_add(1);
    });
    for (int r = 0; r < n; ++r) ASSERT_EQ(count[r].load(), s + 1) << "replica " << r << " step " << s;
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
}

TEST(ReplicaPool, EveryReplicaRunsEveryStepOnce) {
  for (int replicas : {1, 2, 3}) {
    ReplicaPool pool(replicas, 1);
    run_steps(pool, 2000, std::chrono::nanoseconds(0));
    run_steps(pool, 20, pool.spin_window() * 3 + std::chrono::microseconds(200));
  }
}

TEST(ReplicaPool, SpinsOnlyWhenEveryThreadHasACore) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(ReplicaPool(1, 1).spin_window().count(), 0);  // nobody to hand a step to
  EXPECT_EQ(ReplicaPool(cores + 1, 1).spin_window().count(), 0);
  EXPECT_EQ(ReplicaPool(2, cores).spin_window().count(), 0);
  if (cores >= 2) {
    EXPECT_GT(ReplicaPool(2, 1).spin_window().count(), 0);
  }
}

TEST(ReplicaPool, FirstErrorByReplicaIsRethrownAfterAllFinish) {
  ReplicaPool pool(3, 1);
  std::atomic<int> finished{0};
  try {
    pool.run([&](int r) {
      finished.fetch_add(1);
      if (r >= 1) throw std::runtime_error("replica " + std::to_string(r));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "replica 1");
  }
  EXPECT_EQ(finished.load(), 3);
  run_steps(pool, 100, std::chrono::nanoseconds(0));  // still usable
}

}  // namespace
}  // namespace fjit
