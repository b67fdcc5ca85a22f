// Recomputation in elementwise fusion (FusionOptions::recompute, core/compile/fusion/fusion.h):
// a backward group computes again the forward pass's elementwise intermediates from the
// materialized values they come from, so the forward group writes none of them. Oracles: the
// same graph compiled without fusion (bit-identical: the same kernels compute every value),
// the plan with recomputation off (which writes the intermediates), and GELU's derivative in
// closed form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/autodiff/autodiff.h"
#include "core/compile/fusion/fusion.h"
#include "core/compile/passes/pass.h"
#include "core/nn/activations.h"
#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

// y = gelu(x @ w + b) and the VJP of sum(y * seed) with respect to x, w and b: nn's linear and
// GELU in its tanh form. Sizes that are not multiples of the fused blocks.
struct GeluLayer {
  TraceContext ctx{{}};
  std::vector<Array> ins;
  GeluLayer(std::mt19937& rng, bool return_inner) {
    const int64_t m = 37, k = 19, n = 300;
    Tensor x = ctx.parameter(DType::f32, {m, k}, "x");
    Tensor w = ctx.parameter(DType::f32, {k, n}, "w");
    Tensor b = ctx.parameter(DType::f32, {n}, "b");
    Tensor seed = ctx.parameter(DType::f32, {m, n}, "seed");
    for (const Shape& s : {Shape{m, k}, Shape{k, n}, Shape{n}, Shape{m, n}})
      ins.push_back(random_array(DType::f32, s, rng, -1.5, 1.5));
    Tensor z = matmul(x, w) + b;
    // The tanh form: a composite of ops (the exact form is one op, gelu), whose backward
    // group recomputes its intermediates.
    Tensor y = gelu(z, /*approximate=*/true);
    std::vector<Tensor> g = vjp(y, {x, w, b}, seed);
    ctx.graph.outputs = {y.id(), g[0].id(), g[1].id(), g[2].id()};
    if (return_inner) ctx.graph.outputs.push_back(z.id());  // z is read by no other kernel
  }
};

struct PlanCounts {
  int recomputed = 0, extra_roots = 0;
};
PlanCounts counts(const Graph& traced, bool recompute) {
  const Graph g = optimize(traced);
  const std::vector<bool> live = live_nodes(g);
  FusionOptions o;
  o.recompute = recompute;
  const FusionPlan plan = plan_fusion(g, live, o);
  PlanCounts c;
  for (const FusionGroup& grp : plan.groups) {
    c.recomputed += static_cast<int>(grp.recomputed.size());
    c.extra_roots += static_cast<int>(grp.extra_roots.size());
  }
  return c;
}

TEST(FusionRecompute, GeluBackwardRecomputesWhatTheForwardPassWouldWrite) {
  std::mt19937 rng(5);
  GeluLayer layer(rng, false);
  // Without recomputation the forward group writes GELU's intermediates for the backward
  // pass; with it, the backward group computes them again and the forward group writes fewer
  // (one: the chain to 0.5 z is longer than max_recompute from the product).
  const PlanCounts off = counts(layer.ctx.graph, false), on = counts(layer.ctx.graph, true);
  EXPECT_EQ(off.recomputed, 0);
  EXPECT_GT(off.extra_roots, 0);
  EXPECT_GT(on.recomputed, 0);
  EXPECT_LT(on.extra_roots, off.extra_roots);

  Compiled c = compile_both(layer.ctx.graph);
  EXPECT_LT(c.fused->workspace_bytes(), c.plain->workspace_bytes());
  const std::vector<Array> fused = run(*c.fused, layer.ins), plain = run(*c.plain, layer.ins);
  ASSERT_EQ(fused.size(), plain.size());
  for (size_t i = 0; i < fused.size(); ++i)
    EXPECT_TRUE(fused[i].bit_equal(plain[i])) << "output " << i << "\n" << c.fused->plan_string();

  // db = sum over rows of seed * gelu'(z) in double: with u = c (z + 0.044715 z^3),
  // c = sqrt(2 / pi), gelu(z) = z (1 + tanh u) / 2 and
  // gelu'(z) = (1 + tanh u) / 2 + z (1 - tanh^2 u) c (1 + 3 * 0.044715 z^2) / 2.
  const Array &x = layer.ins[0], &w = layer.ins[1], &b = layer.ins[2], &seed = layer.ins[3];
  const int64_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[1];
  for (int64_t j = 0; j < n; j += 13) {
    double db = 0;
    for (int64_t i = 0; i < m; ++i) {
      double z = b.data<float>()[j];
      for (int64_t p = 0; p < k; ++p) z += double(x.data<float>()[i * k + p]) * w.data<float>()[p * n + j];
      const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (z + 0.044715 * z * z * z));
      const double d = 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z);
      db += seed.data<float>()[i * n + j] * d;
    }
    EXPECT_NEAR(fused[3].data<float>()[j], db, 1e-4 * (1 + std::abs(db))) << "column " << j;
  }
}

// A value something besides elementwise ops needs (here: a returned one) is written, and the
// chain through it is read rather than recomputed from the product.
TEST(FusionRecompute, AValueReadElsewhereIsNotRecomputed) {
  std::mt19937 rng(6);
  GeluLayer layer(rng, true);
  const Graph g = optimize(layer.ctx.graph);
  const FusionPlan plan = plan_fusion(g, live_nodes(g));
  const int z = g.outputs.back();
  for (const FusionGroup& grp : plan.groups)
    EXPECT_TRUE(std::find(grp.recomputed.begin(), grp.recomputed.end(), z) == grp.recomputed.end());
  Compiled c = compile_both(layer.ctx.graph);
  const std::vector<Array> fused = run(*c.fused, layer.ins), plain = run(*c.plain, layer.ins);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(fused[i].bit_equal(plain[i])) << "output " << i;
}

// A chain longer than max_recompute nodes is read, not recomputed.
TEST(FusionRecompute, LongChainsAreRead) {
  std::mt19937 rng(7);
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {40, 70}, "x");
  Tensor seed = ctx.parameter(DType::f32, {40, 70}, "seed");
  Tensor h = x;
  for (int i = 0; i < 12; ++i) h = tanh(h * 1.1 + 0.1);
  Tensor y = exp(h);
  ctx.graph.outputs = {y.id(), vjp(y, {x}, seed)[0].id()};
  FusionOptions o;
  const Graph g = optimize(ctx.graph);
  const FusionPlan plan = plan_fusion(g, live_nodes(g), o);
  for (const FusionGroup& grp : plan.groups)
    EXPECT_LE(static_cast<int>(grp.recomputed.size()), o.max_recompute);
  Compiled c = compile_both(ctx.graph);
  const std::vector<Array> ins = {random_array(DType::f32, {40, 70}, rng, -1, 1),
                                  random_array(DType::f32, {40, 70}, rng, -1, 1)};
  const std::vector<Array> fused = run(*c.fused, ins), plain = run(*c.plain, ins);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(fused[i].bit_equal(plain[i])) << "output " << i;
}

}  // namespace
}  // namespace fjit
