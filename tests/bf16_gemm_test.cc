// bf16 x bf16 -> f32 products (core/kernels/gemm/bf16_gemm.h): the active path (AMX tiles or
// AVX512_BF16 dot products where the CPU has them) and the widening fallback, against a double
// loop; the AMX path's edges (rows, columns and depths off its 32 x 32 blocks and 16-pair
// tiles, transposed A) and its bits per row whatever block a row falls in.
#include "core/kernels/gemm/bf16_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/base/isa.h"
#include "core/runtime/jit.h"
#include "core/trace/ops.h"

namespace fjit {
namespace {

std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) {
    const float f = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    x = static_cast<uint16_t>(bits >> 16);  // truncation: any bf16 value will do
  }
  return v;
}

double wide(uint16_t x) {
  const uint32_t bits = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The largest |c - (c0 if accumulate) - A B| over C, A B summed in double (the oracle).
double worst_against_double_loop(int64_t m, int64_t n, int64_t k, const std::vector<uint16_t>& a,
                                 const std::vector<uint16_t>& b, const std::vector<float>& c, double c0) {
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = c0;
      for (int64_t p = 0; p < k; ++p) s += wide(a[i * k + p]) * wide(b[p * n + j]);
      worst = std::max(worst, std::fabs(s - c[i * n + j]));
    }
  return worst;
}

TEST(Bf16Gemm, BothPathsMatchADoubleLoop) {
  struct Case { int64_t m, n, k; };
  for (const Case& cs : {Case{1, 1, 1}, Case{12, 32, 2}, Case{13, 33, 7}, Case{50, 70, 300},
                         Case{128, 96, 513}}) {
    const auto a = random_bf16(cs.m * cs.k, 1), b = random_bf16(cs.k * cs.n, 2);
    const std::vector<float> c0(cs.m * cs.n, 0.5f);
    for (bool widened : {false, true}) {
      for (bool acc : {false, true}) {
        std::vector<float> c = c0;
        if (widened) bf16_gemm_widened(cs.m, cs.n, cs.k, a.data(), b.data(), c.data(), acc);
        else bf16_gemm(cs.m, cs.n, cs.k, a.data(), b.data(), c.data(), acc);
        const double worst = worst_against_double_loop(cs.m, cs.n, cs.k, a, b, c, acc ? 0.5 : 0.0);
        EXPECT_LE(worst, 1e-6 * cs.k + 1e-6)
            << cs.m << "x" << cs.n << "x" << cs.k << (widened ? " widened" : " active path")
            << (active_avx512_bf16() ? " (AVX512_BF16)" : "") << " accumulate=" << acc;
      }
    }
  }
}

}  // namespace
// op(B) packed once (row-major or transposed storage, with a row stride) and multiplied:
// the same bits as bf16_gemm_ex on the row-major B, and a double loop's value.
TEST(Bf16Gemm, PackedBOnceMatchesThePlainProductBitForBit) {
  if (!active_avx512_bf16()) GTEST_SKIP() << "bf16_pack_b is the AVX512_BF16 path's";
  struct Case { int64_t m, n, k; };
  for (const Case& cs : {Case{1, 1, 1}, Case{12, 32, 2}, Case{13, 33, 7}, Case{50, 70, 300},
                         Case{25, 64, 257}}) {
    const int64_t ld = cs.k + 3;  // B stored [n, k] inside rows of ld
    const auto a = random_bf16(cs.m * cs.k, 3), bt = random_bf16(cs.n * ld, 4);
    std::vector<uint16_t> b(cs.k * cs.n);  // the same values row-major [k, n]
    for (int64_t p = 0; p < cs.k; ++p)
      for (int64_t j = 0; j < cs.n; ++j) b[p * cs.n + j] = bt[j * ld + p];
    std::vector<float> plain(cs.m * cs.n), packed(cs.m * cs.n, 7.f), packed_t(cs.m * cs.n, 7.f);
    bf16_gemm_ex(cs.m, cs.n, cs.k, a.data(), cs.k, false, b.data(), plain.data(), false);
    std::vector<uint16_t> bp(bf16_packed_b_size(cs.n, cs.k) + 32);
    uint16_t* al = bp.data() + ((64 - reinterpret_cast<uintptr_t>(bp.data()) % 64) % 64) / 2;
    bf16_pack_b(cs.n, cs.k, b.data(), cs.n, false, al);
    bf16_gemm_packed_b(cs.m, cs.n, cs.k, a.data(), cs.k, false, al, packed.data(), false);
    bf16_pack_b(cs.n, cs.k, bt.data(), ld, true, al);
    bf16_gemm_packed_b(cs.m, cs.n, cs.k, a.data(), cs.k, false, al, packed_t.data(), false);
    double worst = 0;
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < cs.k; ++p) s += wide(a[i * cs.k + p]) * wide(b[p * cs.n + j]);
        worst = std::max(worst, std::fabs(s - packed_t[i * cs.n + j]));
      }
    EXPECT_LE(worst, 1e-6 * cs.k + 1e-6) << cs.m << "x" << cs.n << "x" << cs.k;
    EXPECT_EQ(0, std::memcmp(plain.data(), packed.data(), plain.size() * sizeof(float)))
        << cs.m << "x" << cs.n << "x" << cs.k;
    EXPECT_EQ(0, std::memcmp(plain.data(), packed_t.data(), plain.size() * sizeof(float)))
        << cs.m << "x" << cs.n << "x" << cs.k << " transposed";
  }
}

// A transposed A (op(A) read from A stored [k, m] with a row stride): the active path against
// a double loop, and bit for bit against the same values stored row-major (each element's
// arithmetic does not depend on how its A was stored), edge rows, odd depths, several depth
// blocks and several groups of rows included.
TEST(Bf16Gemm, TransposedAMatchesADoubleLoop) {
  struct Case { int64_t m, n, k; };
  for (const Case& cs : {Case{12, 32, 2}, Case{13, 33, 7}, Case{36, 64, 300}, Case{50, 20, 257},
                         Case{9, 32, 517}, Case{203, 40, 259}}) {
    const int64_t lda = cs.m + 5;
    const auto at = random_bf16(cs.k * lda, 5), b = random_bf16(cs.k * cs.n, 6);
    std::vector<uint16_t> a(cs.m * cs.k);  // the same op(A) row-major
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t p = 0; p < cs.k; ++p) a[i * cs.k + p] = at[p * lda + i];
    std::vector<float> c(cs.m * cs.n), c_rows(cs.m * cs.n);
    bf16_gemm_ex(cs.m, cs.n, cs.k, at.data(), lda, true, b.data(), c.data(), false);
    bf16_gemm_ex(cs.m, cs.n, cs.k, a.data(), cs.k, false, b.data(), c_rows.data(), false);
    double worst = 0;
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t j = 0; j < cs.n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < cs.k; ++p) s += wide(a[i * cs.k + p]) * wide(b[p * cs.n + j]);
        worst = std::max(worst, std::fabs(s - c[i * cs.n + j]));
      }
    EXPECT_LE(worst, 1e-6 * cs.k + 1e-6) << cs.m << "x" << cs.n << "x" << cs.k;
    // (The widening path packs op(A) as stored, so its sums may differ in order.)
    if (active_avx512_bf16()) {
      EXPECT_EQ(0, std::memcmp(c.data(), c_rows.data(), c.size() * sizeof(float)))
          << cs.m << "x" << cs.n << "x" << cs.k;
    }
  }
}

// The AMX path (where this CPU has it) and the AVX512_BF16 one on the same inputs, each within
// f32 accumulation error of a double loop, on shapes off every block and tile edge.
TEST(Bf16Gemm, TheAmxPathMatchesADoubleLoopOnEveryEdge) {
  if (!cpu_has_amx_bf16()) GTEST_SKIP() << "this CPU has no AMX-BF16 the process may use";
  const bool amx_before = active_amx_bf16();
  struct Case { int64_t m, n, k; };
  for (const Case& cs : {Case{1, 1, 1}, Case{31, 17, 31}, Case{32, 32, 32}, Case{33, 33, 33},
                         Case{64, 64, 256}, Case{130, 70, 257}, Case{45, 96, 300}, Case{200, 40, 513}}) {
    const auto a = random_bf16(cs.m * cs.k, 21), b = random_bf16(cs.k * cs.n, 22);
    std::vector<uint16_t> at(cs.k * cs.m);  // A stored [k, m]
    for (int64_t i = 0; i < cs.m; ++i)
      for (int64_t p = 0; p < cs.k; ++p) at[p * cs.m + i] = a[i * cs.k + p];
    for (bool amx : {true, false})
      for (bool trans_a : {false, true})
        for (bool acc : {false, true}) {
          set_amx_allowed(amx);
          std::vector<float> c(cs.m * cs.n, 0.25f);
          bf16_gemm_ex(cs.m, cs.n, cs.k, trans_a ? at.data() : a.data(), trans_a ? cs.m : cs.k, trans_a,
                       b.data(), c.data(), acc);
          set_amx_allowed(amx_before);
          const double worst = worst_against_double_loop(cs.m, cs.n, cs.k, a, b, c, acc ? 0.25 : 0.0);
          EXPECT_LE(worst, 1e-6 * cs.k + 1e-6) << cs.m << "x" << cs.n << "x" << cs.k << (amx ? " amx" : " avx512_bf16")
                                               << " trans_a=" << trans_a << " accumulate=" << acc;
        }
  }
}

// On the AMX path a row's bits do not depend on the block of rows it is computed in (the
// matmul op's row blocks follow the thread count): rows [r0, r1) computed alone, at offsets
// off the 32-row blocks, give the bits of the same rows of the whole product.
TEST(Bf16Gemm, TheAmxPathsRowsHaveTheSameBitsInAnyBlock) {
  if (!cpu_has_amx_bf16()) GTEST_SKIP() << "this CPU has no AMX-BF16 the process may use";
  const int64_t m = 150, n = 70, k = 300;
  const auto a = random_bf16(m * k, 31), b = random_bf16(k * n, 32);
  std::vector<uint16_t> at(k * m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) at[p * m + i] = a[i * k + p];
  for (bool trans_a : {false, true}) {
    std::vector<float> whole(m * n);
    bf16_gemm_ex(m, n, k, trans_a ? at.data() : a.data(), trans_a ? m : k, trans_a, b.data(), whole.data(), false);
    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 12}, {5, 43}, {37, 150}, {96, 97}}) {
      std::vector<float> part((r1 - r0) * n);
      const uint16_t* a0 = trans_a ? at.data() + r0 : a.data() + r0 * k;
      bf16_gemm_ex(r1 - r0, n, k, a0, trans_a ? m : k, trans_a, b.data(), part.data(), false);
      EXPECT_EQ(0, std::memcmp(part.data(), whole.data() + r0 * n, part.size() * sizeof(float)))
          << "rows " << r0 << ".." << r1 << " trans_a=" << trans_a;
    }
  }
}

// The matmul op on bf16 operands (core/kernels/gemm/matmul_bf16.h: row blocks, op(B) packed or
// widened once per batch entry, transposed operands read in place) gives, for every entry, the
// bits of bf16_gemm on the row-major op(A) and op(B): on the AVX512_BF16 path and, under
// FJIT_ISA=avx2, on the widening one. Rows past one block (and edge tiles) included, and on
// the AMX tiles the weight gradients computed as (g^T x)^T (a transposed A with fewer columns
// than rows and a deeper K: the cases 3x37x20x65, 2x100x48x300 and 1x96x40x700), and on
// AVX512_BF16 the narrow products computed transposed (at most 16 columns, fewer than the
// rows: 1x64x10x128, 2x40x16x301, 1x128x10x64).
TEST(Bf16Gemm, TheMatmulOpGivesBf16GemmsBitsForEveryTransposeAndBatch) {
  struct Case { int64_t batch, m, n, k; };
  for (const Case& cs : {Case{1, 13, 33, 7}, Case{3, 37, 20, 65}, Case{1, 250, 70, 129}, Case{2, 100, 48, 300},
                         Case{1, 96, 40, 700}, Case{1, 64, 10, 128}, Case{2, 40, 16, 301},
                         Case{1, 128, 10, 64}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t B = cs.batch, m = cs.m, n = cs.n, k = cs.k;
      const auto av = random_bf16(B * m * k, 11 + t), bv = random_bf16(B * k * n, 12 + t);
      Array a(DType::bf16, ta ? Shape{B, k, m} : Shape{B, m, k}), b(DType::bf16, tb ? Shape{B, n, k} : Shape{B, k, n});
      std::memcpy(a.raw(), av.data(), a.nbytes());
      std::memcpy(b.raw(), bv.data(), b.nbytes());
      auto f = jit([&](const Tensor& x, const Tensor& y) { return matmul(x, y, DType::f32, ta, tb); });
      const Array c = f(a, b);
      ASSERT_EQ(c.shape(), (Shape{B, m, n}));
      for (int64_t e = 0; e < B; ++e) {
        std::vector<uint16_t> oa(m * k), ob(k * n);  // op(A) [m, k], op(B) [k, n] row-major
        for (int64_t i = 0; i < m; ++i)
          for (int64_t p = 0; p < k; ++p) oa[i * k + p] = ta ? av[e * m * k + p * m + i] : av[e * m * k + i * k + p];
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = 0; j < n; ++j) ob[p * n + j] = tb ? bv[e * k * n + j * k + p] : bv[e * k * n + p * n + j];
        std::vector<float> want(m * n);
        bf16_gemm(m, n, k, oa.data(), ob.data(), want.data(), false);
        EXPECT_EQ(0, std::memcmp(want.data(), c.data<float>() + e * m * n, want.size() * sizeof(float)))
            << "entry " << e << " of " << B << "x" << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb;
      }
    }
  }
}

}  // namespace fjit
