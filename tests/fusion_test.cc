// Fused instructions (core/compile/fusion/fusion.h, core/kernels/fused/fused.h) against two oracles: the same
// graph compiled without fusion (elementwise fusion runs the very same kernels, so results
// must be bit-identical) and the reference kernels evaluated node by node (GEMM epilogues
// round differently, so within a tolerance). Shapes include broadcasts and sizes that are not
// a multiple of the fused kernel's block.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

TEST(Fusion, ElementwiseChainMatchesUnfusedBitwiseOverBroadcasts) {
  std::mt19937 rng(7);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {3, 5}, {7, 1000}, {2, 3001}, {129, 10}, {1, 4099}, {1000, 3}, {5, 2049}, {64, 1024}};
  for (DType t : {DType::f32, DType::f64}) {
    for (auto [m, n] : shapes) {
      TraceContext ctx({});
      Tensor x = ctx.parameter(t, {m, n}, "x");
      Tensor row = ctx.parameter(t, {n}, "row");
      Tensor col = ctx.parameter(t, {m, 1}, "col");
      Tensor y = relu(x * row + col) - exp(-abs(x)) * 0.5;
      Tensor z = where(y > col, y, tanh(x)) / (abs(row) + 1.0);
      ctx.graph.outputs = {z.id()};
      Compiled c = compile_both(ctx.graph);
      if (n < 1024 || n % 16 == 0) {  // else rows out of phase (fused_elementwise.cc) may split it
        EXPECT_EQ(c.fused->instrs.back().label.rfind("fused[", 0), 0u) << c.fused->plan_string();
      }
      std::vector<Array> ins = {random_array(t, {m, n}, rng), random_array(t, {n}, rng),
                                random_array(t, {m, 1}, rng)};
      const Array a = run(*c.fused, ins)[0], b = run(*c.plain, ins)[0];
      EXPECT_TRUE(a.bit_equal(b)) << m << "x" << n << " " << dtype_name(t) << "\n"
                                  << c.fused->plan_string();
      EXPECT_LT(max_diff(a, reference(*c.fused->graph, ins)[0]), 1e-5) << m << "x" << n;
    }
  }
}

// Random programs over random broadcast patterns, including integer and boolean steps.
TEST(Fusion, RandomProgramsMatchUnfusedAndReference) {
  std::mt19937 rng(11);
  int fused = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t m = 1 + rng() % 70, n = 1 + rng() % 2500;
    const Shape views[] = {{m, n}, {n}, {m, 1}, {}, {1, n}};
    TraceContext ctx({});
    std::vector<Tensor> params;
    std::vector<Array> ins;
    std::vector<Tensor> pool;  // full-shape values
    for (int k = 0; k < 4; ++k) {
      const Shape s = k == 0 ? Shape{m, n} : views[rng() % 5];
      params.push_back(ctx.parameter(DType::f32, s, fmt::format("p{}", k)));
      ins.push_back(random_array(DType::f32, s, rng));
    }
    // A materialized producer feeding the group (its sum times 0 is exact).
    Tensor acc = rng() % 2 ? params[0] : sum(params[0], {1}, true) * 0.0 + params[0];
    pool.push_back(acc);
    const int steps = 2 + static_cast<int>(rng() % 9);
    for (int s = 0; s < steps; ++s) {
      Tensor a = pool[rng() % pool.size()];
      Tensor b = params[rng() % params.size()];
      switch (rng() % 9) {
        case 0:
          acc = a + b;
          break;
        case 1:
          acc = a * b - a;
          break;
        case 2:
          acc = maximum(a, b);
          break;
        case 3:
          acc = tanh(a) + relu(b + a);
          break;
        case 4:
          acc = where(a < b, a, b * 2.0);
          break;
        case 5:
          acc = cast(cast(a * 3.0, DType::i32) + cast(b, DType::i32), DType::f32);
          break;
        case 6:
          acc = where(logical_and(a > 0.0, b < 0.5), sigmoid(a), -a);
          break;
        case 7:
          acc = a / (abs(b) + 1.0);
          break;
        case 8:
          acc = minimum(exp(-abs(a)), b + a);
          break;
      }
      pool.push_back(acc);
    }
    ctx.graph.outputs = {acc.id()};
    Compiled c = compile_both(ctx.graph);
    const Array a = run(*c.fused, ins)[0], b = run(*c.plain, ins)[0];
    ASSERT_TRUE(a.bit_equal(b)) << "trial " << trial << " " << m << "x" << n << "\n"
                                << c.fused->plan_string();
    EXPECT_LT(max_diff(a, reference(*c.fused->graph, ins)[0]), 1e-4) << "trial " << trial << "\n"
                                                                     << c.fused->plan_string();
    fused += c.fused->instrs.size() < c.plain->instrs.size();
  }
  // Only rows of over ~1000 elements that do not start 64-byte aligned are left unfused.
  EXPECT_GE(fused, 50);
}

// sum(f(x)) for a full sum: bit-identical to summing the materialized value, whatever the
// size relative to the sum's 2048-element leaves.
TEST(Fusion, FusedFullSumIsBitIdenticalToTheUnfusedSum) {
  std::mt19937 rng(5);
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{2048}, int64_t{2049}, int64_t{3 * 4096 + 5},
                      int64_t{401408}}) {
      TraceContext ctx({});
      Tensor x = ctx.parameter(t, {n}, "x");
      Tensor y = ctx.parameter(t, {n}, "y");
      Tensor s = sum(x * x);                                     // one op: a global norm's part
      Tensor r = sum(reshape(relu(x) * y + 0.5, {n, 1}) * 1.0);  // a chain, through a reshape
      Tensor q = sum(where(x > y, x, y) - 0.25);
      ctx.graph.outputs = {s.id(), r.id(), q.id()};
      Compiled c = compile_both(ctx.graph);
      EXPECT_GE(count_label(*c.fused, "fused_sum["), 2) << c.fused->plan_string();
      std::vector<Array> ins = {random_array(t, {n}, rng), random_array(t, {n}, rng)};
      const auto a = run(*c.fused, ins), b = run(*c.plain, ins),
                 ref = reference(*c.fused->graph, ins);
      for (size_t k = 0; k < a.size(); ++k) {
        EXPECT_TRUE(a[k].bit_equal(b[k])) << "n=" << n << " output " << k << "\n"
                                          << c.fused->plan_string();
        EXPECT_LT(max_diff(a[k], ref[k]), t == DType::f32 ? 1e-3 : 1e-9) << n;
      }
    }
  }
}

// A value read by a check, or returned, is never an intermediate of a fused group.
TEST(Fusion, ValuesReadByChecksAndOutputsStayMaterialized) {
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {4, 300}, "x");
  Tensor y = exp(x) * 2.0;
  Tensor z = relu(y - 1.0) + 3.0;
  Tensor w = tanh(z) * 2.0;
  Tensor flag = all(isfinite(y));
  Attrs a;
  a.index = 0;
  const int check = ctx.graph.add(Node{Op::Check, DType::boolean, {}, {flag.id(), y.id()}, a, {}});
  ctx.graph.effects.push_back(check);
  ctx.graph.outputs = {w.id(), z.id()};
  CompileOptions o;
  auto exe = compile(ctx.graph, {}, o);
  // Written out: an instruction's own result, or a further result of a fused group.
  std::vector<int> computed;
  std::string labels;
  for (const Instr& in : exe->instrs) computed.push_back(in.node), labels += in.label + "\n";
  auto has = [&](int id) {
    return std::find(computed.begin(), computed.end(), id) != computed.end() ||
           labels.find("also writes %" + std::to_string(id) + " ") != std::string::npos ||
           labels.find("also writes %" + std::to_string(id) + "]") != std::string::npos ||
           labels.find(" %" + std::to_string(id) + "]") != std::string::npos;
  };
  const Graph& g = *exe->graph;
  for (int id = 0; id < g.size(); ++id) {
    if (g.node(id).op == Op::Exp) continue;  // exp(x) * 2 may fuse: only y itself is read
    if (g.node(id).op == Op::Mul && g.node(id).inputs[0] != id &&
        g.node(g.node(id).inputs[0]).op == Op::Exp) {
      EXPECT_TRUE(has(id)) << "y must be materialized for its check\n" << exe->plan_string();
    }
  }
  EXPECT_GE(count_label(*exe, "fused["), 1) << exe->plan_string();
  Array in = Array::full(DType::f32, {4, 300}, 0.25);
  const auto outs = run(*exe, {in});
  const float yv = std::exp(0.25f) * 2.0f, zv = std::max(yv - 1.0f, 0.0f) + 3.0f;
  EXPECT_NEAR(outs[1].data<float>()[17], zv, 1e-5);
  EXPECT_NEAR(outs[0].data<float>()[1199], std::tanh(zv) * 2.0f, 1e-5);
}

// out = p - lr * (a^T g) and friends as one GEMM, against the reference kernels.
}  // namespace
}  // namespace fjit
