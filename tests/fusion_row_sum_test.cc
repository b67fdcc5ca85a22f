// Fused row sums (core/compile/fusion/fusion.h, kind sum over trailing axes; fused.h,
// select_fused_row_sum): an elementwise program whose value only a reduce_sum over its
// trailing axes reads is summed row by row without being written, members read elsewhere
// written as further results. Oracles: the same graph compiled without fusion (each row is
// summed as the unfused row reduction sums it, so bit for bit, on 1, 2 and 3 intra-op threads)
// and a plain host loop in double (within f32 rounding).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/base/threads.h"
#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

int count_prefix(const Executable& exe, const std::string& prefix) { return count_label(exe, prefix); }

// A norm's variance and its backward sums: sum((x - mean)^2) over the last axis (the centred
// x also returned), sum(g * gamma * xc) over the last axis, and sum(g * xc) over the last two (a sum of
// several rows of the collapsed value, fused while it fits one leaf of 2048 elements).
TEST(FusionRowSum, RowSumsMatchTheUnfusedReductionBitForBit) {
  std::mt19937 rng(3);
  const std::vector<std::array<int64_t, 3>> shapes = {{2, 3, 16}, {4, 64, 384}, {3, 5, 1000}, {1, 7, 2048}, {5, 3, 17}};
  for (auto [m, r, n] : shapes) {
    TraceContext ctx({});
    Tensor x = ctx.parameter(DType::f32, {m, r, n}, "x");
    Tensor mean = ctx.parameter(DType::f32, {m, r, 1}, "mean");
    Tensor g = ctx.parameter(DType::f32, {m, r, n}, "g");
    Tensor gamma = ctx.parameter(DType::f32, {n}, "gamma");
    Tensor xc = x - mean;
    Tensor var = sum(xc * xc, {2}, true);
    Tensor back = sum(g * xc, {1, 2});
    Tensor rows = sum(g * gamma * xc, {2});
    ctx.graph.outputs = {var.id(), back.id(), xc.id(), rows.id()};
    Compiled c = compile_both(ctx.graph);
    EXPECT_EQ(count_prefix(*c.fused, "fused_sum["), r * n <= 2048 || m == 1 ? 3 : 2) << c.fused->plan_string();
    std::vector<Array> ins = {random_array(DType::f32, {m, r, n}, rng), random_array(DType::f32, {m, r, 1}, rng),
                              random_array(DType::f32, {m, r, n}, rng), random_array(DType::f32, {n}, rng)};
    const auto plain = run(*c.plain, ins);
    const int saved = intra_op_threads();
    for (int threads : {1, 2, 3}) {
      set_intra_op_threads(threads);
      const auto fused = run(*c.fused, ins);
      for (size_t k = 0; k < plain.size(); ++k)
        EXPECT_TRUE(fused[k].bit_equal(plain[k])) << m << "x" << r << "x" << n << " result " << k
                                                  << " threads " << threads << "\n" << c.fused->plan_string();
    }
    set_intra_op_threads(saved);
    // Host loop in double.
    const float* xv = ins[0].data<float>();
    const float* mv = ins[1].data<float>();
    const float* gv = ins[2].data<float>();
    const float* gm = ins[3].data<float>();
    for (int64_t i = 0; i < m; ++i) {
      double b = 0, scale = 0;
      for (int64_t j = 0; j < r; ++j) {
        double v = 0, vscale = 0, row = 0, rscale = 0;
        for (int64_t k = 0; k < n; ++k) {
          const int64_t at = (i * r + j) * n + k;
          const double d = static_cast<double>(xv[at]) - mv[i * r + j];
          v += d * d, vscale += d * d;
          b += gv[at] * d, scale += std::abs(gv[at] * d);
          row += gv[at] * static_cast<double>(gm[k]) * d, rscale += std::abs(gv[at] * gm[k] * d);
        }
        EXPECT_NEAR(plain[0].data<float>()[i * r + j], v, 1e-5 * vscale + 1e-6);
        EXPECT_NEAR(plain[3].data<float>()[i * r + j], row, 1e-5 * rscale + 1e-6);
      }
      EXPECT_NEAR(plain[1].data<float>()[i], b, 1e-5 * scale + 1e-6);
    }
  }
}

// Rows the fused row sum does not take (shorter than 16, a reduction over leading axes, rows
// longer than one leaf) stay unfused and correct.
TEST(FusionRowSum, OtherReductionsStayUnfused) {
  std::mt19937 rng(4);
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {6, 8}, "x");
  Tensor y = ctx.parameter(DType::f32, {3, 4097}, "y");
  Tensor a = sum(x * x, {1});
  Tensor b = sum(x * 2.0, {0});
  Tensor c2 = sum(y * y, {1});
  ctx.graph.outputs = {a.id(), b.id(), c2.id()};
  Compiled c = compile_both(ctx.graph);
  EXPECT_EQ(count_prefix(*c.fused, "fused_sum["), 0) << c.fused->plan_string();
  std::vector<Array> ins = {random_array(DType::f32, {6, 8}, rng), random_array(DType::f32, {3, 4097}, rng)};
  const auto fused = run(*c.fused, ins), plain = run(*c.plain, ins);
  for (size_t k = 0; k < plain.size(); ++k) EXPECT_TRUE(fused[k].bit_equal(plain[k])) << k;
}

}  // namespace
}  // namespace fjit
