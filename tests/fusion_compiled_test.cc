// Compiled fused programs (core/kernels/fused_compiled.h) and the op-by-op fused pass that
// runs every other program. Oracle: the same graph compiled without fusion, bit for bit, on
// sizes that are not multiples of a vector, a range or a block, on one thread and on two.
#include <gtest/gtest.h>

#include <random>

#include "core/lib/optimizers.h"
#include "core/runtime/threads.h"
#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

void expect_bit_equal(const std::vector<Array>& a, const std::vector<Array>& b, const Executable& exe) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(a[k].bit_equal(b[k])) << "output " << k << "\n" << exe.plan_string();
}

// The fused plan's outputs with 1 and with 2 intra-op threads, each equal to the unfused
// plan's.
void expect_matches_unfused(const Graph& g, const std::vector<Array>& ins) {
  Compiled c = compile_both(g);
  const int saved = intra_op_threads();
  const auto plain = run(*c.plain, ins);
  for (int threads : {1, 2}) {
    set_intra_op_threads(threads);
    expect_bit_equal(run(*c.fused, ins), plain, *c.fused);
  }
  set_intra_op_threads(saved);
}

// Adam (a later step: moments not zero) on one parameter, which the compiled program runs.
TEST(CompiledFusion, AdamMatchesUnfusedOnAnySize) {
  std::mt19937 rng(11);
  for (DType t : {DType::f32, DType::f64})
    for (const Shape& s : std::vector<Shape>{{1}, {15}, {3, 17}, {37, 1100}, {1031, 1029}}) {
      TraceContext ctx{{}};
      TensorDict p, g, state;
      p.set("w", ctx.parameter(t, s, "p"));
      g.set("w", ctx.parameter(t, s, "g"));
      state.set("m.w", ctx.parameter(t, s, "m"));
      state.set("v.w", ctx.parameter(t, s, "v"));
      state.set("step", ctx.parameter(DType::i32, {}, "step"));
      const std::vector<Array> ins = {random_array(t, s, rng), random_array(t, s, rng),
                                      random_array(t, s, rng), random_array(t, s, rng, 0.0, 1.0),
                                      Array::scalar<int32_t>(6)};
      auto [p2, s2] = Adam{.lr = 3e-3}.update(p, g, state);
      ctx.graph.outputs.push_back(p2.at("w").id());
      for (const auto& [name, x] : s2) ctx.graph.outputs.push_back(x.id());
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " " << s.size() << "-d, " << ins[0].size());
      expect_matches_unfused(ctx.graph, ins);
    }
}

// A program no compiled table matches, so the block-by-block pass runs it: a row vector, a
// scalar, a column and further results, one of them read again by later steps.
TEST(CompiledFusion, BlockPassWithRowsScalarsAndFurtherResultsMatchesUnfused) {
  std::mt19937 rng(12);
  for (const Shape& s : std::vector<Shape>{{5, 7}, {37, 1100}, {700, 1531}}) {
    TraceContext ctx{{}};
    Tensor x = ctx.parameter(DType::f32, s, "x"), r = ctx.parameter(DType::f32, {s[1]}, "r");
    Tensor c = ctx.parameter(DType::f32, {s[0], 1}, "c"), k = ctx.parameter(DType::f32, {}, "k");
    Tensor a = x * k + r;           // further result
    Tensor b = sqrt(abs(a) + c);    // further result
    Tensor out = (b - a / c) * x;   // reads x again after a
    for (const Tensor& o : {out, a, b}) ctx.graph.outputs.push_back(o.id());
    const std::vector<Array> ins = {random_array(DType::f32, s, rng),
                                    random_array(DType::f32, {s[1]}, rng),
                                    random_array(DType::f32, {s[0], 1}, rng, 0.5, 2.0),
                                    random_array(DType::f32, {}, rng)};
    SCOPED_TRACE(testing::Message() << s[0] << "x" << s[1]);
    expect_matches_unfused(ctx.graph, ins);
  }
}

}  // namespace
}  // namespace fjit
