// cumsum and top_k through jit (core/trace/ops.h): values against host loops, the same bits
// on one intra-op thread and on several, and misuse that names the op and the call site.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;
using testing::random_f32;

TEST(TopK, ValuesAndIndicesMatchAHostSortOnAnyThreadCount) {
  const int64_t rows = 37, vocab = 1000, k = 8;
  Array x = random_f32({rows, vocab}, 11);
  x.data<float>()[5] = x.data<float>()[9] = 2.0f;  // a tie above every other value of row 0
  auto f = jit([](const Tensor& x) {
    auto [v, i] = top_k(x, 8);
    return std::tuple{v, i};
  });
  set_intra_op_threads(1);
  auto [v1, i1] = f(x);
  set_intra_op_threads(4);
  auto [v4, i4] = f(x);
  EXPECT_TRUE(v1.bit_equal(v4));
  EXPECT_TRUE(i1.bit_equal(i4));
  ASSERT_EQ(v1.shape(), (Shape{rows, k}));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data<float>() + r * vocab;
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(i1.data<int32_t>()[r * k + j], order[j]) << r << "," << j;
      EXPECT_EQ(v1.data<float>()[r * k + j], row[order[j]]) << r << "," << j;
    }
  }
  EXPECT_EQ(i1.data<int32_t>()[0], 5);
  EXPECT_EQ(i1.data<int32_t>()[1], 9);
}

TEST(Cumsum, MatchesARunningSumInEitherDirection) {
  const Array x = testing::random_f64({3, 50, 4}, 2);
  auto f = jit([](const Tensor& x) { return std::tuple{cumsum(x, 1), cumsum(x, -2, true)}; });
  auto [fwd, rev] = f(x);
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t c = 0; c < 4; ++c) {
      double run = 0, back = 0;
      for (int64_t b = 0; b < 50; ++b) {
        run += x.data<double>()[(a * 50 + b) * 4 + c];
        back += x.data<double>()[(a * 50 + 49 - b) * 4 + c];
        EXPECT_EQ(fwd.data<double>()[(a * 50 + b) * 4 + c], run);
        EXPECT_EQ(rev.data<double>()[(a * 50 + 49 - b) * 4 + c], back);
      }
    }
}

TEST(TopK, MisuseNamesTheOpAndTheCallSite) {
  int line = 0;
  auto f = jit([&](const Tensor& x) {
    line = __LINE__ + 1;
    return top_k(x, 5).first;
  });
  std::string e = error_of<TraceError>([&] { f(random_f32({2, 4}, 1)); });
  EXPECT_NE(e.find("top_k(f32[2,4]): k = 5 is outside [0, 4]"), std::string::npos) << e;
  EXPECT_NE(e.find("cumsum_top_k_test.cc:" + std::to_string(line)), std::string::npos) << e;
  auto g = jit([&](const Tensor& x) {
    line = __LINE__ + 1;
    return cumsum(x, 2);
  });
  e = error_of<TraceError>([&] { g(random_f32({2, 4}, 1)); });
  EXPECT_NE(e.find("cumsum(f32[2,4]): axis 2 is out of range"), std::string::npos) << e;
  EXPECT_NE(e.find("cumsum_top_k_test.cc:" + std::to_string(line)), std::string::npos) << e;
}

}  // namespace
}  // namespace fjit
