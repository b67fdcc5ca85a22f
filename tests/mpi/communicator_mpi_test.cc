// The MPI backend under mpiexec (run with 2 and 3 ranks): closed-form results, bitwise
// agreement with the thread backend, metrics, stall reports. Every rank runs every test; the
// exit code is non-zero when any rank failed. Rank 0 prints gtest's report, the others only
// failures. Jobs that must fail (a rank that throws, a rank that hangs) are separate CTest
// entries: tests/mpi/failure_tests.cmake.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/base/log.h"
#include "core/base/metrics.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/shm_communicator.h"
#include "tests/communicator_testing.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using namespace std::chrono_literals;
using testing::contribution;
using testing::expected;

// Short enough that a test bug (ranks calling different collectives) ends the job quickly.
StallPolicy test_policy() {
  StallPolicy p;
  p.warn_after = 5s;
  p.abort_after = 30s;
  return p;
}

MpiCommunicator& comm() {
  static MpiCommunicator* c = new MpiCommunicator(MPI_COMM_WORLD, test_policy());
  return *c;
}

using testing::LogCapture;

// Whether every rank runs on this machine (the shared-memory tests need it; on simulated
// hosts, tests/mpi/multihost_gtests.sh, the ranks do not). The same answer on every rank.
bool ranks_share_a_machine() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int on_node = 0, world = 0;
  MPI_Comm_size(node, &on_node);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_free(&node);
  return on_node == world;
}

// One round of whole buffers (small, or mid-sized with non-eager chunks) and chunked rounds.
// ... and 300007: several 1 MiB segments for 4- and 8-byte types, the last one short.
constexpr int64_t kCounts[] = {1, 17, 1000, 3000, 70001, 300007};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::logical_or};

template <class T>
void check_closed_form(Communicator& c) {
  const int n = c.size();
  for (ReduceOp op : kOps) {
    for (int64_t count : kCounts) {
      std::vector<T> buf(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) buf[i] = contribution<T>(op, c.rank(), n, i);
      c.all_reduce(buf.data(), count, dtype_of<T>::value, op);
      int64_t wrong = 0, first = -1;
      for (int64_t i = 0; i < count; ++i) {
        if (buf[i] != expected<T>(op, n, i) && wrong++ == 0) first = i;
      }
      EXPECT_EQ(wrong, 0) << dtype_name(dtype_of<T>::value) << " " << reduce_op_name(op)
                          << " count=" << count << " first wrong element " << first;
    }
  }
}

// Through the shared-memory window (these ranks share a machine) and through messages.
TEST(MpiCommunicator, AllReduceClosedFormEveryDtypeAndOp) {
  EXPECT_EQ(comm().backend(), "mpi");
  MpiCommunicator messages(MPI_COMM_WORLD, test_policy());
  messages.set_shared_memory(false);
  for (Communicator* c : {static_cast<Communicator*>(&comm()), static_cast<Communicator*>(&messages)}) {
    SCOPED_TRACE(c == &comm() ? "shared window" : "messages");
    check_closed_form<float>(*c);
    check_closed_form<double>(*c);
    check_closed_form<int32_t>(*c);
    check_closed_form<uint8_t>(*c);
  }
}

// Each rank replays the whole job on a ShmGroup of `size` threads and compares bytes.
template <class T>
void check_matches_threads(ReduceOp op, int64_t count) {
  Communicator& c = comm();
  const int n = c.size();
  std::vector<T> mpi_result = testing::fill<T>(count, testing::order_sensitive<T>, c.rank());
  c.all_reduce(mpi_result.data(), count, dtype_of<T>::value, op);

  std::vector<T> thread_result;
  ShmGroup group(n, test_policy());
  group.run([&](Communicator& t) {
    std::vector<T> buf = testing::fill<T>(count, testing::order_sensitive<T>, t.rank());
    t.all_reduce(buf.data(), count, dtype_of<T>::value, op);
    if (t.rank() == 0) thread_result = std::move(buf);
  });
  ASSERT_EQ(thread_result.size(), mpi_result.size());
  EXPECT_EQ(std::memcmp(thread_result.data(), mpi_result.data(), count * sizeof(T)), 0)
      << dtype_name(dtype_of<T>::value) << " " << reduce_op_name(op) << " count=" << count;
  if (op == ReduceOp::sum) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) {
      const T want = testing::rank_order_sum<T>(n, i);
      wrong += std::memcmp(&mpi_result[i], &want, sizeof(T)) != 0;
    }
    EXPECT_EQ(wrong, 0) << "elements not summed as ((x0 + x1) + x2) + ...";
  }
}

TEST(MpiCommunicator, BitwiseEqualToThreadBackend) {
  for (ReduceOp op : kOps) {
    for (int64_t count : {int64_t{1000}, int64_t{3000}, int64_t{100003}, int64_t{300007}}) {
      check_matches_threads<float>(op, count);
      check_matches_threads<double>(op, count);
    }
  }
}

// Ranks on one machine (as under these tests) reduce through the shared-memory window; ranks
// on several machines exchange messages. Both paths give the same bits, for every op, dtype
// and size: one round of messages, two rounds, several window segments.
template <class T>
void expect_same_bits(MpiCommunicator& window, MpiCommunicator& messages, ReduceOp op, int64_t count) {
  std::vector<T> a = testing::fill<T>(count, testing::order_sensitive<T>, window.rank());
  std::vector<T> b = a;
  window.all_reduce(a.data(), count, dtype_of<T>::value, op);
  messages.all_reduce(b.data(), count, dtype_of<T>::value, op);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), count * sizeof(T)), 0)
      << dtype_name(dtype_of<T>::value) << " " << reduce_op_name(op) << " count=" << count;
}

TEST(MpiCommunicator, SharedWindowAndMessagesGiveTheSameBits) {
  MpiCommunicator messages(MPI_COMM_WORLD, test_policy());
  messages.set_shared_memory(false);
  for (ReduceOp op : kOps) {
    for (int64_t count : {int64_t{1}, int64_t{999}, int64_t{5001}, int64_t{70001}, int64_t{600011}}) {
      expect_same_bits<float>(comm(), messages, op, count);
      expect_same_bits<double>(comm(), messages, op, count);
    }
  }
}

// all_reduce_apply (through the shared-memory window when the ranks share this machine, as
// under these tests; several segments, calls back to back): the rank-order sum, once each.
TEST(MpiCommunicator, AllReduceApplyHandsOverTheRankOrderSumOnce) {
  MpiCommunicator c(MPI_COMM_WORLD, test_policy());
  const int n = c.size();
  struct Seen {
    std::vector<double> values;
    std::vector<int> hits;
  };
  for (int64_t count : {int64_t{1}, int64_t{70001}, int64_t{300007}, int64_t{5}, int64_t{300007}}) {
    Seen seen{std::vector<double>(count), std::vector<int>(count)};
    std::vector<double> src = testing::fill<double>(count, testing::order_sensitive<double>, c.rank());
    std::vector<double> scratch(count);
    c.all_reduce_apply(src.data(), scratch.data(), count, DType::f64, &seen,
                       [](void* ctx, int64_t begin, int64_t len, const void* values) {
                         auto& s = *static_cast<Seen*>(ctx);
                         std::memcpy(s.values.data() + begin, values, len * sizeof(double));
                         for (int64_t i = begin; i < begin + len; ++i) ++s.hits[i];
                       });
    int64_t wrong = 0, not_once = 0;
    for (int64_t i = 0; i < count; ++i) {
      const double want = testing::rank_order_sum<double>(n, i);
      wrong += std::memcmp(&seen.values[i], &want, sizeof(double)) != 0;
      not_once += seen.hits[i] != 1;
    }
    EXPECT_EQ(wrong, 0) << "count " << count;
    EXPECT_EQ(not_once, 0) << "count " << count;
  }
}

// A source in the shared workspace is read where it lies; each rank says where its own is, so
// ranks may place their sources at different offsets, or (odd ranks here) outside the
// workspace, and still get the rank-order sum. Also all_reduce of a buffer in the workspace,
// and a workspace that grows.
TEST(MpiCommunicator, SharedWorkspaceSourcesAreReadWhereTheyLie) {
  if (!ranks_share_a_machine()) GTEST_SKIP() << "the ranks are on different machines";
  MpiCommunicator c(MPI_COMM_WORLD, test_policy());
  const int n = c.size(), me = c.rank();
  const int64_t count = 300007;  // several 1 MiB window segments
  const size_t bytes = (count + 64 * n) * sizeof(double);
  EXPECT_EQ(c.shared_workspace(8), nullptr) << "nothing reserved yet";
  for (size_t reserve : {bytes, 2 * bytes}) {
    c.reserve_shared_workspace(reserve);
    auto* ws = static_cast<double*>(c.shared_workspace(reserve));
    ASSERT_NE(ws, nullptr) << "these ranks share a machine";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ws) % 64, 0u);
    EXPECT_EQ(c.shared_workspace(reserve + 1), nullptr);
    std::vector<double> private_copy;
    double* src = ws + 8 * me + 3;  // a different offset on every rank
    if (me % 2 == 1) {
      private_copy.resize(count);
      src = private_copy.data();
    }
    const std::vector<double> values = testing::fill<double>(count, testing::order_sensitive<double>, me);
    std::copy(values.begin(), values.end(), src);
    const int64_t before = c.segments_read_in_place();
    std::vector<double> got(count), scratch(count);
    c.all_reduce_apply(src, scratch.data(), count, DType::f64, got.data(),
                       [](void* ctx, int64_t begin, int64_t len, const void* v) {
                         std::memcpy(static_cast<double*>(ctx) + begin, v, len * sizeof(double));
                       });
    EXPECT_EQ(c.segments_read_in_place() - before, me % 2 == 0 ? 3 : 0);
    c.all_reduce(src, count, DType::f64, ReduceOp::sum);
    int64_t wrong = 0, wrong_in_place = 0;
    for (int64_t i = 0; i < count; ++i) {
      const double want = testing::rank_order_sum<double>(n, i);
      wrong += std::memcmp(&got[i], &want, sizeof want) != 0;
      wrong_in_place += std::memcmp(&src[i], &want, sizeof want) != 0;
    }
    EXPECT_EQ(wrong, 0) << "all_reduce_apply, workspace of " << reserve << " bytes";
    EXPECT_EQ(wrong_in_place, 0) << "all_reduce, workspace of " << reserve << " bytes";
  }
}

// Where shared memory is short (a container's 64 MiB /dev/shm; here a budget), OpenMPI
// would abort the job in MPI_Win_allocate_shared: the communicator does without, says so
// once, and gives the same bits.
TEST(MpiCommunicator, WithTooLittleSharedMemoryItDoesWithout) {
  if (!ranks_share_a_machine()) GTEST_SKIP() << "the ranks are on different machines";
  MpiCommunicator c(MPI_COMM_WORLD, test_policy()), messages(MPI_COMM_WORLD, test_policy());
  messages.set_shared_memory(false);
  c.set_shared_memory_budget(int64_t{1} << 20);  // less than the window takes
  LogCapture capture;
  expect_same_bits<float>(c, messages, ReduceOp::sum, 70001);
  expect_same_bits<double>(c, messages, ReduceOp::max, 5);
  c.reserve_shared_workspace(1 << 16);
  EXPECT_EQ(c.shared_workspace(1), nullptr);
  if (c.rank() == 0) {
    const std::string log = capture.text();
    EXPECT_NE(log.find("shared memory:"), std::string::npos) << log;
    EXPECT_NE(log.find("the all-reduce window"), std::string::npos) << log;
  }
}

// The window fits but a workspace does not: plans keep their own memory, sources are copied.
TEST(MpiCommunicator, WorkspaceBeyondTheSharedMemoryBudgetStaysPrivate) {
  MpiCommunicator c(MPI_COMM_WORLD, test_policy());
  c.set_shared_memory_budget(int64_t{64} << 20);  // the window takes 2 x 4 MiB per rank
  const int64_t count = 300007;
  std::vector<double> src = testing::fill<double>(count, testing::order_sensitive<double>, c.rank());
  std::vector<double> got(count), scratch(count);
  c.reserve_shared_workspace(size_t{32} << 20);  // 2 x 32 MiB per rank: over the budget
  EXPECT_EQ(c.shared_workspace(1), nullptr);
  c.reserve_shared_workspace(size_t{32} << 20);  // refused once, not asked again
  c.all_reduce_apply(src.data(), scratch.data(), count, DType::f64, got.data(),
                     [](void* ctx, int64_t begin, int64_t len, const void* v) {
                       std::memcpy(static_cast<double*>(ctx) + begin, v, len * sizeof(double));
                     });
  EXPECT_EQ(c.segments_read_in_place(), 0);
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double want = testing::rank_order_sum<double>(c.size(), i);
    wrong += std::memcmp(&got[i], &want, sizeof want) != 0;
  }
  EXPECT_EQ(wrong, 0);
}

// Segmenting changes which elements travel together, never what is added to what.
// (20011 doubles: with 24-byte segments that is ~6700 message rounds, which on 3 ranks
// sharing 2 cores already takes seconds; 300007 took 30-45 s.)
TEST(MpiCommunicator, SegmentSizeDoesNotChangeTheResult) {
  const int64_t count = 20011;
  std::vector<std::vector<double>> results;
  for (size_t segment : {size_t{0}, size_t{65536}, size_t{4096}, size_t{24}}) {
    MpiCommunicator c(MPI_COMM_WORLD, test_policy());
    c.set_shared_memory(false);  // segments are the message path's
    c.set_segment_bytes(segment);
    std::vector<double> buf = testing::fill<double>(count, testing::order_sensitive<double>, c.rank());
    c.all_reduce(buf.data(), count, DType::f64, ReduceOp::sum);
    results.push_back(std::move(buf));
  }
  for (size_t k = 1; k < results.size(); ++k) {
    EXPECT_EQ(std::memcmp(results[k].data(), results[0].data(), count * sizeof(double)), 0)
        << "segment setting " << k;
  }
}

TEST(MpiCommunicator, BroadcastFromNonZeroRoot) {
  Communicator& c = comm();
  const int root = c.size() - 1;
  for (size_t nbytes : {size_t{13}, size_t{3} << 20}) {
    std::vector<uint8_t> buf(nbytes, 0xEE);
    if (c.rank() == root) {
      for (size_t j = 0; j < nbytes; ++j) buf[j] = static_cast<uint8_t>(j * 31 + 7);
    }
    c.broadcast(buf.data(), nbytes, root);
    size_t wrong = 0;
    for (size_t j = 0; j < nbytes; ++j) wrong += buf[j] != static_cast<uint8_t>(j * 31 + 7);
    EXPECT_EQ(wrong, 0u) << nbytes << " bytes";
  }
}

TEST(MpiCommunicator, AllGatherInRankOrderAndInPlace) {
  Communicator& c = comm();
  const int n = c.size();
  for (size_t block : {size_t{1001}, size_t{1} << 20}) {  // eager and rendezvous messages
    std::vector<uint8_t> send(block), recv(block * n, 0), want(block * n);
    for (size_t j = 0; j < block; ++j) send[j] = static_cast<uint8_t>(c.rank() * 50 + j);
    for (int r = 0; r < n; ++r) {
      for (size_t j = 0; j < block; ++j) want[r * block + j] = static_cast<uint8_t>(r * 50 + j);
    }
    c.all_gather(send.data(), recv.data(), block);
    EXPECT_TRUE(recv == want) << block << " bytes per rank";
    std::vector<uint8_t> inplace(block * n, 0);
    std::memcpy(&inplace[c.rank() * block], send.data(), block);
    c.all_gather(&inplace[c.rank() * block], inplace.data(), block);
    EXPECT_TRUE(inplace == want) << block << " bytes per rank, in place";
  }
}

TEST(MpiCommunicator, ZeroLengthBuffersAreNoOps) {
  Communicator& c = comm();
  c.all_reduce(nullptr, 0, DType::f32, ReduceOp::sum);
  c.broadcast(nullptr, 0, c.size() - 1);
  c.all_gather(nullptr, nullptr, 0);
  c.barrier();
  int32_t x = c.rank();
  c.all_reduce(&x, 1, DType::i32, ReduceOp::sum);
  EXPECT_EQ(x, c.size() * (c.size() - 1) / 2);
}

// Every rank is its own process and records its own collectives into its metrics().
TEST(MpiCommunicator, CollectivesRecordCallsBytesAndTime) {
  Communicator& c = comm();
  c.barrier();
  metrics().reset();
  testing::run_one_of_each(c, 100000);  // the chunked path, then one round
  EXPECT_EQ(testing::recorded(), testing::one_of_each(100000));
  metrics().reset();
}

TEST(MpiCommunicator, StalledRankIsReported) {
  StallPolicy policy;
  policy.warn_after = 200ms;
  policy.abort_after = 0ms;
  MpiCommunicator c(MPI_COMM_WORLD, policy);
  LogCapture capture;
  // The ranks start together; the last one stays away past the warning (200 ms) and past the
  // roll call's grace for answers after it (500 ms at the least, parallel/mpi_communicator.cc),
  // with room for a loaded machine: a rank that arrives within the grace answers it.
  MPI_Barrier(MPI_COMM_WORLD);  // not through c: its first collective is the one below
  if (c.rank() == c.size() - 1) std::this_thread::sleep_for(1500ms);
  float x = 1.0f;
  c.all_reduce(&x, 1, DType::f32, ReduceOp::sum);
  EXPECT_EQ(x, static_cast<float>(c.size()));
  if (c.rank() == 0) {
    const std::string log = capture.text();
    EXPECT_NE(log.find(fmt::format("warning stall: rank 0 of {} (mpi, on ", c.size())),
              std::string::npos) << log;
    EXPECT_NE(log.find(fmt::format("not arrived: rank {} (on ", c.size() - 1)), std::string::npos)
        << log;
    EXPECT_NE(log.find("in all_reduce #1"), std::string::npos) << log;
  }
}

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name(), r.line_number(),
                 r.summary());
  }

 private:
  const int rank_;
};

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  fjit::mpi_init_once(&argc, &argv);
  fjit::install_mpi_terminate_handler();
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = fjit::mpi_world_rank();
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new fjit::RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed) std::fprintf(stderr, "a test failed on another rank\n");
  return any_failed;
}
