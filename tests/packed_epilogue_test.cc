// The packed GEMM's tile epilogue and its batched form (core/kernels/gemm/packed_gemm.h) on
// every instruction set this CPU has: against a host loop in double, the epilogue's product
// bit-identical to packed_sgemm's, every tile handed over once (its prefetch just before), and
// the bits independent of the thread count. The GEMM update built on the epilogue is tested
// through the graph in tests/fusion_gemm_test.cc (run with FJIT_ISA=avx2 too).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/base/isa.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "fjit.h"
#include "tests/gemm_test_util.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::isas_here;
using testing::random_vector;

// C = 2 * P - C, the tile's product copied to `copy`, a count of calls per tile, and a count
// of the tiles whose prefetch came last before their apply on the same thread.
struct Recorder {
  int64_t n;
  float* c;
  float* copy;
  std::vector<int>* calls;
  std::vector<int>* prefetched;
  static inline thread_local int64_t last[4] = {-1, -1, -1, -1};
  static void prefetch(void*, int64_t row0, int64_t col0, int64_t rows, int64_t cols) {
    last[0] = row0, last[1] = col0, last[2] = rows, last[3] = cols;
  }
  static void apply(void* ctx, const float* p, int64_t ldp, int64_t row0, int64_t col0,
                    int64_t rows, int64_t cols, int64_t tile) {
    auto& r = *static_cast<Recorder*>(ctx);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t at = (row0 + i) * r.n + col0 + j;
        r.c[at] = 2.f * p[i * ldp + j] - r.c[at];
        r.copy[at] = p[i * ldp + j];
      }
    ++(*r.calls)[tile];
    if (last[0] == row0 && last[1] == col0 && last[2] == rows && last[3] == cols)
      ++(*r.prefetched)[tile];
    last[0] = -1;
  }
};

struct Case {
  int64_t m, n, k;
};
// Edge tiles both ways, one depth block and several (an unequal last), a narrow and a wide one.
const Case kCases[] = {{1, 1, 1},     {5, 7, 3},      {13, 33, 17},  {64, 10, 300},
                       {128, 64, 513}, {100, 129, 784}, {3, 200, 257}, {50, 48, 1000}};

TEST(PackedEpilogue, MatchesADoubleLoopAndThePlainProductsBits) {
  for (Isa isa : isas_here()) {
    for (const Case& cs : kCases) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const int64_t m = cs.m, n = cs.n, k = cs.k;
        const std::vector<float> a = random_vector(m * k, 1 + t), b = random_vector(k * n, 7 + t);
        const std::vector<float> c0 = random_vector(m * n, 11);
        for (int threads : {1, 3}) {
          std::vector<float> c = c0, copy(m * n, NAN), plain(m * n);
          std::vector<int> calls(packed_tile_count(isa, m, n), 0), prefetched = calls;
          Recorder rec{n, c.data(), copy.data(), &calls, &prefetched};
          packed_sgemm_tiles(isa, ta, tb, m, n, k, a.data(), b.data(),
                             TileEpilogue{Recorder::apply, &rec, Recorder::prefetch}, threads);
          packed_sgemm(isa, ta, tb, m, n, k, a.data(), b.data(), plain.data(), false, 1);
          for (int x : calls) ASSERT_EQ(x, 1) << isa_name(isa);
          for (int x : prefetched)
            ASSERT_EQ(x, 1) << isa_name(isa) << ": apply without its prefetch";
          EXPECT_EQ(0, std::memcmp(copy.data(), plain.data(), plain.size() * sizeof(float)))
              << isa_name(isa) << " " << m << "x" << n << "x" << k << " t=" << t << " threads "
              << threads;
          double worst = 0;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = 0;
              for (int64_t p = 0; p < k; ++p)
                s += double(ta ? a[p * m + i] : a[i * k + p]) * double(tb ? b[j * k + p] : b[p * n + j]);
              worst = std::max(worst, std::fabs(2 * s - c0[i * n + j] - c[i * n + j]));
            }
          EXPECT_LE(worst, 2e-6 * k + 2e-6) << isa_name(isa) << " " << m << "x" << n << "x" << k;
        }
      }
    }
  }
}

TEST(PackedBatched, MatchesADoubleLoopWithSharedAndStridedOperands) {
  for (Isa isa : isas_here()) {
    for (const Case& cs : {Case{64, 64, 32}, Case{37, 65, 100}, Case{256, 64, 256}}) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const int64_t m = cs.m, n = cs.n, k = cs.k, batch = 5;
        for (int shared = 0; shared < 3; ++shared) {  // 0 none, 1 A shared, 2 B shared
          const int64_t sa = shared == 1 ? 0 : m * k, sb = shared == 2 ? 0 : k * n;
          const std::vector<float> a = random_vector(m * k * batch, 2 + t);
          const std::vector<float> b = random_vector(k * n * batch, 9 + t);
          std::vector<float> one(m * n * batch), many(m * n * batch, NAN);
          packed_sgemm_batched(isa, ta, tb, batch, m, n, k, a.data(), sa, b.data(), sb, one.data(), 1);
          for (int threads : {2, 3, 8}) {
            packed_sgemm_batched(isa, ta, tb, batch, m, n, k, a.data(), sa, b.data(), sb,
                                 many.data(), threads);
            EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
                << isa_name(isa) << " threads " << threads;
          }
          double worst = 0;
          for (int64_t e = 0; e < batch; ++e) {
            const float* ae = a.data() + e * sa;
            const float* be = b.data() + e * sb;
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (int64_t p = 0; p < k; ++p)
                  s += double(ta ? ae[p * m + i] : ae[i * k + p]) *
                       double(tb ? be[j * k + p] : be[p * n + j]);
                worst = std::max(worst, std::fabs(s - one[(e * m + i) * n + j]));
              }
          }
          EXPECT_LE(worst, 1e-6 * k + 1e-6)
              << isa_name(isa) << " " << m << "x" << n << "x" << k << " t=" << t << " shared " << shared;
        }
      }
    }
  }
}

// A batched matmul through the graph ([B, M, K] @ [B, K, N], and a shared rank-2 operand on
// the left), compiled under each instruction set: against a double loop, and the same bits
// with 1 and 2 intra-op threads.
TEST(PackedBatched, BatchedMatmulOpMatchesADoubleLoop) {
  const int64_t batch = 3, m = 70, k = 96, n = 80;
  const int saved = intra_op_threads();
  for (Isa isa : isas_here()) {
    set_isa_limit(isa);
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2, shared_a = t == 1;
      const Shape as = shared_a ? Shape{k, m} : ta ? Shape{batch, k, m} : Shape{batch, m, k};
      const Shape bs = tb ? Shape{batch, n, k} : Shape{batch, k, n};
      const Array a = testing::random_f32(as, 31 + t), b = testing::random_f32(bs, 37 + t);
      auto f = jit([ta, tb](const Tensor& a, const Tensor& b) { return matmul(a, b, ta, tb); });
      set_intra_op_threads(1);
      const Array one = f(a, b);
      set_intra_op_threads(2);
      const Array two = f(a, b);
      EXPECT_TRUE(one.bit_equal(two)) << isa_name(isa) << " t=" << t;
      const float* pa = a.data<float>();
      const float* pb = b.data<float>();
      double worst = 0;
      for (int64_t e = 0; e < batch; ++e)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const float* ae = pa + (shared_a ? 0 : e * m * k);
            const float* be = pb + e * k * n;
            double s = 0;
            for (int64_t p = 0; p < k; ++p)
              s += double(ta ? ae[p * m + i] : ae[i * k + p]) * double(tb ? be[j * k + p] : be[p * n + j]);
            worst = std::max(worst, std::fabs(s - one.data<float>()[(e * m + i) * n + j]));
          }
      EXPECT_LE(worst, 1e-6 * k + 1e-6) << isa_name(isa) << " t=" << t;
    }
  }
  set_isa_limit(Isa::avx512);
  set_intra_op_threads(saved);
}

}  // namespace
}  // namespace fjit
