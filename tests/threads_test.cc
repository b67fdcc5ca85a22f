// Intra-op threads: the setting is per thread, the default splits the cores among replicas,
// a bad FJIT_INTRA_OP_THREADS is a clear error, and a multi-threaded GEMM computes the same
// product as a single-threaded one (reference: a plain triple loop in double).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "fjit.h"
#include "parallel/backends.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::EnvVar;

TEST(IntraOpThreads, SettingIsPerThread) {
  set_intra_op_threads(1);
  int other = 0;
  std::thread t([&] {
    set_intra_op_threads(2);
    other = intra_op_threads();
  });
  t.join();
  EXPECT_EQ(intra_op_threads(), 1);
#ifdef _OPENMP
  EXPECT_EQ(other, 2);
#endif
  EXPECT_THROW(set_intra_op_threads(0), std::invalid_argument);
}

TEST(IntraOpThreads, DefaultSplitsTheCoresAmongReplicas) {
  EnvVar unset("FJIT_INTRA_OP_THREADS", nullptr);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(default_intra_op_threads(1), std::max(1, cores));
  EXPECT_EQ(default_intra_op_threads(cores), 1);
  EXPECT_EQ(default_intra_op_threads(4 * cores), 1);  // never zero
}

// Read at Mesh start-up (parallel/backends.h), never by the default itself.
TEST(IntraOpThreads, EnvironmentOverridesAndBadValuesAreErrors) {
  {
    EnvVar set("FJIT_INTRA_OP_THREADS", "3");
    EXPECT_EQ(replica_intra_op_threads(8), 3);
    EXPECT_EQ(Mesh::threads(2).intra_op_threads(), 3);
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    EXPECT_EQ(default_intra_op_threads(1), std::max(1, cores));  // the default reads nothing
  }
  for (const char* bad : {"0", "-2", "two", "3x"}) {
    EnvVar set("FJIT_INTRA_OP_THREADS", bad);
    EXPECT_THROW(Mesh::threads(1), std::invalid_argument) << bad;
    try {
      replica_intra_op_threads(1);
      ADD_FAILURE() << "accepted FJIT_INTRA_OP_THREADS=" << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(IntraOpThreads, ParallelGemmMatchesTheReference) {
  const int64_t m = 192, k = 384, n = 256;  // large enough for Eigen to split the product
  Array a = he_uniform({m, k}, 1), b = he_uniform({k, n}, 2);
  auto f = jit([](const Tensor& x, const Tensor& y) { return matmul(x, y); });
  set_intra_op_threads(2);
  Array two = f(a, b);
  set_intra_op_threads(1);
  Array one = f(a, b);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (int64_t i = 0; i < m; i += 7) {
    for (int64_t j = 0; j < n; j += 5) {
      double ref = 0;
      for (int64_t p = 0; p < k; ++p) ref += double(pa[i * k + p]) * pb[p * n + j];
      EXPECT_NEAR(one.data<float>()[i * n + j], ref, 1e-4 * (1 + std::abs(ref)));
      EXPECT_NEAR(two.data<float>()[i * n + j], ref, 1e-4 * (1 + std::abs(ref)));
    }
  }
}

}  // namespace
}  // namespace fjit
