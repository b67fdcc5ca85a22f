// fjit's packed GEMM (core/kernels/gemm/packed_gemm.h) on every instruction set this CPU has,
// against a host loop in double; bits against the thread count; the ISA selection
// (core/base/isa.h) and its use by matmul.
#include "core/kernels/gemm/packed_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/base/isa.h"
#include "core/kernels/gemm/ukernel.h"
#include "tests/gemm_test_util.h"

namespace fjit {
namespace {

using testing::isas_here;
using testing::random_vector;

struct Case {
  int64_t m, n, k;
};

// Edge tiles in both directions, one depth block and several (unequal last), tiny and wide;
// the last two read a small row-major B in place (one depth block, and two).
const Case kCases[] = {{1, 1, 1},     {5, 7, 3},      {12, 32, 16},   {13, 33, 17},
                       {64, 10, 300}, {37, 100, 9},   {128, 64, 513}, {100, 129, 784},
                       {3, 200, 257}, {50, 48, 1000}, {64, 128, 64},  {29, 32, 300}};

TEST(PackedGemm, MatchesADoubleLoopForEveryTransposeAndIsa) {
  for (Isa isa : isas_here()) {
    for (const Case& cs : kCases) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const int64_t m = cs.m, n = cs.n, k = cs.k;
        const std::vector<float> a = random_vector(m * k, 1 + t), b = random_vector(k * n, 7 + t);
        const std::vector<float> c0 = random_vector(m * n, 11);
        for (bool acc : {false, true}) {
          std::vector<float> c = c0;
          packed_sgemm(isa, ta, tb, m, n, k, a.data(), b.data(), c.data(), acc, 1);
          double worst = 0;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = acc ? c0[i * n + j] : 0.0;
              for (int64_t p = 0; p < k; ++p)
                s += double(ta ? a[p * m + i] : a[i * k + p]) * double(tb ? b[j * k + p] : b[p * n + j]);
              worst = std::max(worst, std::fabs(s - c[i * n + j]));
            }
          // |a|, |b| <= 1: a float sum of k products is within about k * 2^-24 * k of exact.
          EXPECT_LE(worst, 1e-6 * k + 1e-6)
              << isa_name(isa) << " m=" << m << " n=" << n << " k=" << k << " ta=" << ta
              << " tb=" << tb << " accumulate=" << acc;
        }
      }
    }
  }
}

TEST(PackedGemm, BitsDoNotDependOnTheThreadCount) {
  for (Isa isa : isas_here()) {
    for (const Case& cs : {Case{300, 200, 600}, Case{128, 512, 784}, Case{2048, 96, 40}}) {
      const std::vector<float> a = random_vector(cs.m * cs.k, 3), b = random_vector(cs.k * cs.n, 4);
      std::vector<float> one(cs.m * cs.n);
      packed_sgemm(isa, false, true, cs.m, cs.n, cs.k, a.data(), b.data(), one.data(), false, 1);
      for (int threads : {2, 3, 4}) {
        std::vector<float> many(cs.m * cs.n, -1.f);
        packed_sgemm(isa, false, true, cs.m, cs.n, cs.k, a.data(), b.data(), many.data(), false,
                     threads);
        EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
            << isa_name(isa) << " " << cs.m << "x" << cs.n << "x" << cs.k << ", " << threads
            << " threads";
      }
    }
  }
}

// A small row-major B [k, n] is read in place (no packing) where a transposed one is packed:
// the kernel sums the same products in the same order either way, so the bits are the same.
TEST(PackedGemm, BInPlaceGivesThePackedBsBits) {
  for (Isa isa : isas_here()) {
    for (const Case& cs :
         {Case{64, 128, 64}, Case{29, 32, 300}, Case{12, 32, 16}, Case{13, 64, 7}}) {
      for (bool ta : {false, true}) {
        const int64_t m = cs.m, n = cs.n, k = cs.k;
        const std::vector<float> a = random_vector(m * k, 3), b = random_vector(k * n, 4);
        std::vector<float> bt(k * n);  // B^T [n, k]
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = 0; j < n; ++j) bt[j * k + p] = b[p * n + j];
        std::vector<float> in_place(m * n), packed(m * n);
        packed_sgemm(isa, ta, false, m, n, k, a.data(), b.data(), in_place.data(), false, 1);
        packed_sgemm(isa, ta, true, m, n, k, a.data(), bt.data(), packed.data(), false, 1);
        EXPECT_EQ(0, std::memcmp(in_place.data(), packed.data(), packed.size() * sizeof(float)))
            << isa_name(isa) << " " << m << "x" << n << "x" << k << " ta=" << ta;
      }
    }
  }
}

// The first m rows of a 1000-row product op(A_tall) op(B), which packs B whole, against the
// m-row product op(A) op(B) whose B is streamed, bit for bit, for 1-3 threads. A_tall is
// [1000, k], or with ta [k, 1000]; A is its first m rows of op(A).
void expect_streamed_rows(Isa isa, bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  const int64_t tall = 1000;
  const std::vector<float> a_tall = random_vector(tall * k, seed), b = random_vector(k * n, seed + 1);
  std::vector<float> a(a_tall.begin(), a_tall.begin() + m * k);  // A [m, k]: A_tall's first rows
  if (ta)  // A [k, m]: the first m columns of A_tall [k, tall]
    for (int64_t p = 0; p < k; ++p) std::copy_n(a_tall.data() + p * tall, m, a.data() + p * m);
  std::vector<float> whole(tall * n);
  packed_sgemm(isa, ta, tb, tall, n, k, a_tall.data(), b.data(), whole.data(), false, 1);
  for (int threads : {1, 2, 3}) {
    std::vector<float> streamed(m * n, -1.f);
    packed_sgemm(isa, ta, tb, m, n, k, a.data(), b.data(), streamed.data(), false, threads);
    EXPECT_EQ(0, std::memcmp(whole.data(), streamed.data(), streamed.size() * sizeof(float)))
        << isa_name(isa) << " " << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb
        << ", " << threads << " threads";
  }
}

// A short op(A) (its packed depth block in L2) has its B slivers packed one at a time as they
// are used; a tall one has all of B packed first. Both sum the same products in the same order,
// so the short product's rows are the tall one's first rows, bit for bit, at any thread count.
TEST(PackedGemm, StreamedBGivesTheWholePackedBsBits) {
  for (Isa isa : isas_here())
    for (const Case& cs : {Case{128, 512, 784}, Case{37, 100, 300}, Case{300, 40, 1000}})
      for (bool tb : {false, true}) expect_streamed_rows(isa, false, tb, cs.m, cs.n, cs.k, 5);
}

// A weight gradient's shape: op(A) = A^T with A [k, m], deeper than one depth block, few rows:
// B is streamed too.
TEST(PackedGemm, StreamedBWithATransposedGivesTheWholePackedBsBits) {
  for (Isa isa : isas_here())
    for (const Case& cs : {Case{384, 1536, 2048}, Case{37, 100, 600}, Case{64, 40, 1000}})
      for (bool tb : {false, true}) expect_streamed_rows(isa, true, tb, cs.m, cs.n, cs.k, 7);
}

TEST(PackedGemm, DepthZeroClearsOrKeeps) {
  std::vector<float> c(6, 5.f);
  packed_sgemm(Isa::avx2, false, false, 2, 3, 0, nullptr, nullptr, c.data(), true, 1);
  EXPECT_EQ(c, std::vector<float>(6, 5.f));
  packed_sgemm(Isa::avx2, false, false, 2, 3, 0, nullptr, nullptr, c.data(), false, 1);
  EXPECT_EQ(c, std::vector<float>(6, 0.f));
}

TEST(Isa, TheLimitOnlyNarrows) {
  const Isa detected = detected_isa();
  set_isa_limit(Isa::avx2);
  EXPECT_EQ(active_isa(), Isa::avx2);
  EXPECT_FALSE(active_avx512_bf16());
  set_isa_limit(Isa::avx512);
  EXPECT_EQ(active_isa(), detected);
  EXPECT_EQ(active_avx512_bf16(), cpu_has_avx512_bf16());
  if (cpu_has_avx512_bf16()) {
    EXPECT_EQ(detected, Isa::avx512);
  }
  EXPECT_STREQ(isa_name(Isa::avx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::avx512), "avx512");
  // The kernel named in the library line is the active set's.
  EXPECT_NE(std::string(packed_gemm_name()).find(isa_name(active_isa())), std::string::npos);
}

// Each element is one fma chain over each depth block, from zero, added to C block by block;
// the kernels cut the depth alike, so the AVX2 and AVX-512 kernels give the same bits.
TEST(Isa, BothKernelsGiveTheSameBits) {
  EXPECT_EQ(gemm::ukernel_avx2().kc, gemm::ukernel_avx512().kc);
  if (detected_isa() != Isa::avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  for (const Case& cs : kCases) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const std::vector<float> a = random_vector(cs.m * cs.k, 5), b = random_vector(cs.k * cs.n, 6);
      std::vector<float> narrow(cs.m * cs.n), wide(cs.m * cs.n);
      packed_sgemm(Isa::avx2, ta, tb, cs.m, cs.n, cs.k, a.data(), b.data(), narrow.data(), false, 1);
      packed_sgemm(Isa::avx512, ta, tb, cs.m, cs.n, cs.k, a.data(), b.data(), wide.data(), false, 2);
      EXPECT_EQ(0, std::memcmp(narrow.data(), wide.data(), narrow.size() * sizeof(float)))
          << cs.m << "x" << cs.n << "x" << cs.k << " ta=" << ta << " tb=" << tb;
    }
  }
}

// AVX-512 has two tiles, 12 and 8 rows; the driver takes the 8-row one where it pads op(A)'s
// rows less (64, 128, 200 rows) and the 12-row one otherwise (216). Both sum each element the
// same way, so an m-row product's rows are a 216-row product's first rows, bit for bit.
TEST(Isa, BothAvx512TilesGiveTheSameBits) {
  if (detected_isa() != Isa::avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  EXPECT_EQ(gemm::ukernel_avx512_8().kc, gemm::ukernel_avx512().kc);
  EXPECT_EQ(packed_tile_count(Isa::avx512, 64, 32), 8);    // 8-row tiles
  EXPECT_EQ(packed_tile_count(Isa::avx512, 216, 32), 18);  // 12-row tiles
  const int64_t tall = 216, n = 100;
  for (int64_t k : {40, 256, 600})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const std::vector<float> a_tall = random_vector(tall * k, 3 + t), b = random_vector(k * n, 9);
      std::vector<float> whole(tall * n);
      packed_sgemm(Isa::avx512, ta, tb, tall, n, k, a_tall.data(), b.data(), whole.data(), false, 1);
      for (int64_t m : {8, 64, 128, 200}) {
        std::vector<float> a(a_tall.begin(), a_tall.begin() + m * k);  // op(A)'s first m rows
        if (ta)
          for (int64_t p = 0; p < k; ++p) std::copy_n(a_tall.data() + p * tall, m, a.data() + p * m);
        for (int threads : {1, 2, 3}) {
          std::vector<float> c(m * n, -1.f);
          packed_sgemm(Isa::avx512, ta, tb, m, n, k, a.data(), b.data(), c.data(), false, threads);
          EXPECT_EQ(0, std::memcmp(whole.data(), c.data(), c.size() * sizeof(float)))
              << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb << ", " << threads
              << " threads";
        }
      }
    }
}

}  // namespace
}  // namespace fjit
