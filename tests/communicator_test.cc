// The thread backend (ShmGroup) against closed-form results, for 1 to 4 replicas, every
// dtype and op; bitwise agreement across replicas; stall warnings and the abort path.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/base/log.h"
#include "core/base/metrics.h"
#include "parallel/shm_communicator.h"
#include "tests/communicator_testing.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using namespace std::chrono_literals;
using testing::contribution;
using testing::expected;

using testing::LogCapture;

StallPolicy quiet_policy() {
  StallPolicy p;
  p.warn_after = 10s;
  p.abort_after = 0ms;
  return p;
}

void run_replicas(int n, const std::function<void(Communicator&)>& fn,
                  StallPolicy policy = quiet_policy()) {
  ShmGroup group(n, policy);
  group.run(fn);
}

constexpr int64_t kCounts[] = {1, 17, 1000, 70001};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::logical_or};

template <class T>
void check_closed_form(int n) {
  for (ReduceOp op : kOps) {
    for (int64_t count : kCounts) {
      run_replicas(n, [&](Communicator& c) {
        std::vector<T> buf(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) buf[i] = contribution<T>(op, c.rank(), n, i);
        c.all_reduce(buf.data(), count, dtype_of<T>::value, op);
        int64_t wrong = 0, first = -1;
        for (int64_t i = 0; i < count; ++i) {
          if (buf[i] != expected<T>(op, n, i) && wrong++ == 0) first = i;
        }
        EXPECT_EQ(wrong, 0) << dtype_name(dtype_of<T>::value) << " " << reduce_op_name(op)
                            << " n=" << n << " count=" << count << " rank=" << c.rank()
                            << " first wrong element " << first;
      });
    }
  }
}

TEST(ShmCommunicator, AllReduceClosedFormEveryDtypeAndOp) {
  for (int n = 1; n <= 4; ++n) {
    check_closed_form<float>(n);
    check_closed_form<double>(n);
    check_closed_form<int32_t>(n);
    check_closed_form<uint8_t>(n);
  }
}

template <class T>
void check_rank_order(int n) {
  const int64_t count = 50000;
  std::vector<std::vector<T>> results(n);
  run_replicas(n, [&](Communicator& c) {
    std::vector<T> buf = testing::fill<T>(count, testing::order_sensitive<T>, c.rank());
    c.all_reduce(buf.data(), count, dtype_of<T>::value, ReduceOp::sum);
    results[c.rank()] = std::move(buf);
  });
  int64_t differs_from_reverse = 0;
  for (int64_t i = 0; i < count; ++i) {
    const T want = testing::rank_order_sum<T>(n, i);
    ASSERT_EQ(std::memcmp(&results[0][i], &want, sizeof(T)), 0) << "element " << i;
    if (testing::reverse_order_sum<T>(n, i) != want) ++differs_from_reverse;
  }
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), count * sizeof(T)), 0)
        << "replica " << r << " differs from replica 0";
  }
  // Floating-point addition is commutative, so only three or more replicas expose the order.
  if (n >= 3) {
    EXPECT_GT(differs_from_reverse, 0) << "test data does not depend on the order";
  }
}

TEST(ShmCommunicator, SumIsInRankOrderAndBitwiseEqualAcrossReplicas) {
  for (int n = 1; n <= 4; ++n) {
    check_rank_order<float>(n);
    check_rank_order<double>(n);
  }
}

TEST(ShmCommunicator, MaxMinPropagateNaN) {
  run_replicas(3, [](Communicator& c) {
    float v[2] = {c.rank() == 1 ? std::nanf("") : 1.0f, c.rank() == 2 ? std::nanf("") : 2.0f};
    float w[2] = {v[0], v[1]};
    c.all_reduce(v, 2, DType::f32, ReduceOp::max);
    c.all_reduce(w, 2, DType::f32, ReduceOp::min);
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]) && std::isnan(w[0]) && std::isnan(w[1]));
  });
}

TEST(ShmCommunicator, BroadcastFromNonZeroRoot) {
  for (int n = 1; n <= 4; ++n) {
    const int root = n - 1;
    run_replicas(n, [&](Communicator& c) {
      std::vector<uint8_t> buf(4099, static_cast<uint8_t>(0xEE));
      if (c.rank() == root) {
        for (size_t j = 0; j < buf.size(); ++j) buf[j] = static_cast<uint8_t>(j * 31 + 7);
      }
      c.broadcast(buf.data(), buf.size(), root);
      for (size_t j = 0; j < buf.size(); ++j) {
        ASSERT_EQ(buf[j], static_cast<uint8_t>(j * 31 + 7)) << "rank " << c.rank() << " byte " << j;
      }
    });
  }
}

TEST(ShmCommunicator, AllGatherInRankOrderAndInPlace) {
  for (int n = 1; n <= 4; ++n) {
    run_replicas(n, [&](Communicator& c) {
      const size_t block = 1001;
      std::vector<uint8_t> send(block), recv(block * n, 0), want(block * n);
      for (size_t j = 0; j < block; ++j) send[j] = static_cast<uint8_t>(c.rank() * 50 + j);
      for (int r = 0; r < n; ++r) {
        for (size_t j = 0; j < block; ++j) want[r * block + j] = static_cast<uint8_t>(r * 50 + j);
      }
      c.all_gather(send.data(), recv.data(), block);
      EXPECT_EQ(recv, want) << "rank " << c.rank();
      // In place: the send block already sits at this rank's position in recv.
      std::vector<uint8_t> inplace(block * n, 0);
      std::memcpy(&inplace[c.rank() * block], send.data(), block);
      c.all_gather(&inplace[c.rank() * block], inplace.data(), block);
      EXPECT_EQ(inplace, want) << "rank " << c.rank() << " (in place)";
    });
  }
}

TEST(ShmCommunicator, ZeroLengthBuffersAreNoOps) {
  run_replicas(3, [](Communicator& c) {
    c.all_reduce(nullptr, 0, DType::f32, ReduceOp::sum);
    c.broadcast(nullptr, 0, 2);
    c.all_gather(nullptr, nullptr, 0);
    int32_t x = c.rank();
    c.all_reduce(&x, 1, DType::i32, ReduceOp::sum);  // the group still works afterwards
    EXPECT_EQ(x, 3);
  });
}

TEST(ShmCommunicator, ManyMixedCollectivesOversubscribed) {
  // Four replicas on a two-core machine: waits go through the yield and futex paths.
  run_replicas(4, [](Communicator& c) {
    for (int step = 0; step < 300; ++step) {
      int32_t v = c.rank() + step;
      c.all_reduce(&v, 1, DType::i32, ReduceOp::sum);
      ASSERT_EQ(v, 6 + 4 * step);
      int32_t b = c.rank() == step % 4 ? step : -1;
      c.broadcast(&b, sizeof b, step % 4);
      ASSERT_EQ(b, step);
      if (step % 7 == 0) c.barrier();
    }
  });
}

TEST(ShmCommunicator, ReplicaThatThrowsCancelsTheOthers) {
  ShmGroup group(3, quiet_policy());
  std::atomic<int> cancelled{0};
  try {
    group.run([&](Communicator& c) {
      if (c.rank() == 1) throw std::runtime_error("replica one broke");
      try {
        c.barrier();  // would wait for rank 1 forever
      } catch (const CollectiveCancelled&) {
        ++cancelled;
        throw;
      }
    });
    FAIL() << "run() should rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "replica one broke");
  }
  EXPECT_EQ(cancelled.load(), 2);
  EXPECT_TRUE(group.cancelled());
}

TEST(ShmCommunicator, LateReplicaIsReportedAndStillCompletes) {
  LogCapture capture;
  StallPolicy policy;
  policy.warn_after = 50ms;
  policy.abort_after = 0ms;
  std::vector<float> results(3);
  run_replicas(3, [&](Communicator& c) {
    c.barrier();
    if (c.rank() == 2) std::this_thread::sleep_for(400ms);
    float x = static_cast<float>(c.rank() + 1);
    c.all_reduce(&x, 1, DType::f32, ReduceOp::sum);
    results[c.rank()] = x;
  }, policy);
  EXPECT_EQ(results, (std::vector<float>{6, 6, 6}));
  const std::string log = capture.text();
  EXPECT_NE(log.find("warning stall: replica 0 of 3 (threads) has waited"), std::string::npos) << log;
  EXPECT_NE(log.find("in all_reduce #2; not arrived: replica 2 (last entered barrier #1)"),
            std::string::npos) << log;
}

TEST(ShmCommunicatorDeathTest, StallPastAbortAfterEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        StallPolicy policy;
        policy.warn_after = 10ms;
        policy.abort_after = 100ms;
        ShmGroup group(2, policy);
        std::unique_ptr<Communicator> c = group.communicator(0);
        c->barrier();  // replica 1 never comes
      },
      "aborting the job \\(replica 0 of 2, threads\\): stall: .* barrier #1; not arrived: "
      "replica 1");
}

// One record per collective per process (replica 0's), whatever the replica count.
TEST(ShmCommunicator, CollectivesRecordCallsBytesAndTimeOnce) {
  for (int n = 1; n <= 4; ++n) {
    metrics().reset();
    run_replicas(n, [](Communicator& c) { testing::run_one_of_each(c, 1000); });
    EXPECT_EQ(testing::recorded(), testing::one_of_each(1000)) << "n=" << n;
    const std::string report = metrics_report();
    EXPECT_NE(report.find("allreduce: calls=2 bytes=4040"), std::string::npos) << report;
  }
  metrics().reset();
}

TEST(StallPolicy, ReadsEnvironment) {
  setenv("FJIT_STALL_WARN_S", "0.25", 1);
  setenv("FJIT_STALL_ABORT_S", "bogus", 1);
  StallPolicy p = StallPolicy::from_environment();
  EXPECT_EQ(p.warn_after, 250ms);
  EXPECT_EQ(p.abort_after, StallPolicy{}.abort_after);  // a typo keeps the default
  unsetenv("FJIT_STALL_WARN_S");
  unsetenv("FJIT_STALL_ABORT_S");
}

}  // namespace
}  // namespace fjit
