// Copy groups (kCopy, core/compile/fusion/fusion.h): chains of layout ops, with a cast or the
// `+ 0` of summed slice adjoints, run as one pass. Oracles: the node-by-node reference
// evaluation (the reference kernels) and the same graph compiled without fusion, bit for bit,
// on 1 to 3 intra-op threads.
#include <gtest/gtest.h>

#include <random>

#include "core/autodiff/autodiff.h"
#include "core/base/threads.h"
#include "core/compile/fusion/fusion.h"
#include "core/compile/passes/pass.h"
#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

struct CopyGroups {
  int groups = 0, members = 0;
};
CopyGroups copy_groups(const Graph& traced) {
  const Graph g = optimize(traced);
  const FusionPlan plan = plan_fusion(g, live_nodes(g));
  CopyGroups c;
  for (const FusionGroup& grp : plan.groups)
    if (grp.kind == FusionGroup::kCopy) ++c.groups, c.members += static_cast<int>(grp.members.size());
  return c;
}

// Runs the fused and the unfused plan on 1, 2 and 3 threads and the reference evaluation; every
// output must have the reference's bits.
void expect_bits(const Graph& traced, const std::vector<Array>& ins) {
  const std::vector<Array> want = reference(optimize(traced), ins);
  Compiled c = compile_both(traced);
  ASSERT_GT(count_label(*c.fused, "copy["), 0) << c.fused->plan_string();
  for (int threads : {1, 2, 3}) {
    set_intra_op_threads(threads);
    const std::vector<Array> fused = run(*c.fused, ins), plain = run(*c.plain, ins);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(fused[i].bit_equal(want[i])) << "output " << i << ", " << threads << " threads\n"
                                               << c.fused->plan_string();
      EXPECT_TRUE(plain[i].bit_equal(want[i])) << "output " << i << ", " << threads << " threads";
    }
  }
  set_intra_op_threads(1);
}

// Attention's heads cut from one projection qkv [B, T, 3 H dh]: q, k, v each sliced, maybe
// cast to bf16, split into heads and transposed to [B, H, T, dh]. Sizes that are no multiple
// of anything, and large enough that the copies split over threads.
struct Heads {
  TraceContext ctx{{}};
  std::vector<Array> ins;
  Tensor qkv;
  std::vector<Tensor> heads;
  static constexpr int64_t B = 3, T = 37, H = 5, dh = 24;
  Heads(std::mt19937& rng, bool bf16) {
    qkv = ctx.parameter(DType::f32, {B, T, 3 * H * dh}, "qkv");
    ins.push_back(random_array(DType::f32, {B, T, 3 * H * dh}, rng));
    for (int64_t part = 0; part < 3; ++part) {
      Tensor y = slice(qkv, {0, 0, part * H * dh}, {B, T, (part + 1) * H * dh});
      if (bf16) y = cast(y, DType::bf16);
      heads.push_back(transpose(reshape(y, {B, T, H, dh}), {0, 2, 1, 3}));
    }
  }
};

TEST(FusionCopy, HeadsCutFromOneProjectionAreOnePassEach) {
  for (bool bf16 : {false, true}) {
    std::mt19937 rng(1);
    Heads h(rng, bf16);
    for (const Tensor& y : h.heads) h.ctx.graph.outputs.push_back(y.id());
    const CopyGroups c = copy_groups(h.ctx.graph);
    EXPECT_EQ(c.groups, 3) << "bf16 " << bf16;
    // slice, reshape, transpose (and the cast) in each
    EXPECT_EQ(c.members, 3 * (bf16 ? 4 : 3)) << "bf16 " << bf16;
    expect_bits(h.ctx.graph, h.ins);
  }
}

TEST(FusionCopy, CotangentsOfTheHeadsAreConcatenatedAndAddedToZeroInOnePass) {
  std::mt19937 rng(2);
  Heads h(rng, false);
  Tensor loss;
  for (const Tensor& y : h.heads) {
    Tensor seed = h.ctx.parameter(DType::f32, y.shape(), "seed");
    Array s = random_array(DType::f32, y.shape(), rng);
    // Negative zeros: the unfused `+ 0` turns them into +0, and so must the copy group.
    for (int64_t i = 0; i < s.size(); i += 7) s.data<float>()[i] = -0.0f;
    h.ins.push_back(s);
    Tensor term = sum(y * seed);
    loss = loss.defined() ? loss + term : term;
  }
  Tensor one = h.ctx.parameter(DType::f32, {}, "one");
  h.ins.push_back(Array::full(DType::f32, {}, 1.0));
  h.ctx.graph.outputs = {vjp(loss, {h.qkv}, one)[0].id()};
  const Graph g = optimize(h.ctx.graph);
  const FusionPlan plan = plan_fusion(g, live_nodes(g));
  bool plus_zero = false;
  for (const FusionGroup& grp : plan.groups)
    if (grp.kind == FusionGroup::kCopy && g.node(grp.root).op == Op::Add) plus_zero = true;
  EXPECT_TRUE(plus_zero) << g.to_string();
  expect_bits(h.ctx.graph, h.ins);
}

// Chains whose views cross dimensions: a transpose read through a reshape that merges and
// splits other dimensions, slices with steps, and a concat of such parts.
TEST(FusionCopy, ChainsThroughReshapesSlicesWithStepsAndConcats) {
  std::mt19937 rng(3);
  TraceContext ctx{{}};
  Tensor x = ctx.parameter(DType::f32, {4, 6, 20}, "x");
  Tensor z = ctx.parameter(DType::f32, {10, 12, 16}, "z");
  std::vector<Array> ins = {random_array(DType::f32, {4, 6, 20}, rng),
                            random_array(DType::f32, {10, 12, 16}, rng)};
  // [4, 6, 20] -> [6, 4, 20] -> [24, 20] -> rows 2..21 -> [5, 4, 20] -> [4, 5, 20]
  Tensor a = transpose(reshape(slice(reshape(transpose(x, {1, 0, 2}), {24, 20}), {2, 0}, {22, 20}),
                               {5, 4, 20}),
                       {1, 0, 2});
  // every other row of z's middle axis, columns 4..15, heads of 4 moved first
  Tensor b = transpose(reshape(slice(z, {0, 1, 4}, {10, 12, 16}, {1, 2, 1}), {10, 6, 3, 4}), {2, 0, 1, 3});
  Tensor c = concat({transpose(reshape(slice(z, {0, 0, 0}, {10, 12, 8}), {10, 12, 2, 4}), {0, 2, 1, 3}),
                     transpose(reshape(cast(cast(slice(z, {0, 0, 8}, {10, 12, 16}), DType::bf16), DType::f32),
                                       {10, 12, 2, 4}),
                               {0, 2, 1, 3})},
                    1);
  ctx.graph.outputs = {a.id(), b.id(), c.id()};
  EXPECT_GE(copy_groups(ctx.graph).groups, 2);
  expect_bits(ctx.graph, ins);
}

TEST(FusionCopy, AValueReadElsewhereIsWrittenByItsOwnOpAndReadAsItIs) {
  std::mt19937 rng(4);
  Heads h(rng, true);
  // The first head's slice is an output too: it is no member, and the cast and transpose
  // after it read it; the other two heads are whole chains.
  Tensor cut = slice(h.qkv, {0, 0, 0}, {Heads::B, Heads::T, Heads::H * Heads::dh});
  for (const Tensor& y : h.heads) h.ctx.graph.outputs.push_back(y.id());
  h.ctx.graph.outputs.push_back(cut.id());
  const Graph g = optimize(h.ctx.graph);
  const FusionPlan plan = plan_fusion(g, live_nodes(g));
  for (const FusionGroup& grp : plan.groups) {
    if (grp.kind != FusionGroup::kCopy) continue;
    for (int m : grp.members) EXPECT_FALSE(g.node(m).op == Op::Slice && m == g.outputs.back()) << g.to_string();
  }
  expect_bits(h.ctx.graph, h.ins);
}

}  // namespace
}  // namespace fjit
