// Sums of zero-padded values (core/compile/passes/padded_sums.cc): the adjoints of slices of
// one value, in disjoint ranges of an axis, placed by one concat instead of added as padded
// buffers. Oracles: the traced graph evaluated node by node by the reference kernels (the
// padded adds, -0 + 0 == +0 included), the same graph compiled without fusion, and a host loop
// that puts each cotangent + 0.0f in its range and +0 elsewhere. Bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

int count_op(const Executable& exe, Op op) {
  int n = 0;
  for (const Instr& in : exe.instrs) n += in.op == op && in.label.rfind("fused[", 0) != 0;
  return n;
}

bool same_bits(const Array& a, const Array& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.size() * dtype_size(a.dtype()))) == 0;
}

// Cotangents with -0, NaN with a payload, infinities and denormals among the random values.
void add_edge_values(Array& x) {
  const uint32_t bits[] = {0x80000000u, 0x7fc00123u, 0xff800000u, 0x00000001u, 0x80000000u, 0x7f800000u};
  for (size_t i = 0; i < std::size(bits) && static_cast<int64_t>(i) < x.size(); ++i)
    std::memcpy(x.data<float>() + i * 5 % x.size(), &bits[i], 4);
}

struct Case {
  Shape shape;
  int64_t axis;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) along axis, in trace order
};

TEST(PaddedSums, SliceCotangentsInDisjointRangesAreOneConcatWithTheSameBits) {
  std::mt19937 rng(11);
  const std::vector<Case> cases = {
      {{4, 8, 24}, 2, {{0, 8}, {8, 16}, {16, 24}}},      // q, k, v of one projection
      {{4, 8, 24}, 2, {{16, 24}, {0, 8}, {8, 16}}},      // in another order
      {{5, 3, 30}, 2, {{2, 7}, {11, 12}, {20, 29}}},     // gaps before, between and after
      {{9, 6}, 0, {{1, 3}, {3, 4}, {6, 9}, {4, 5}}},     // four, on the leading axis
      {{3, 10, 7}, 1, {{0, 10}}},                         // one slice, the whole axis: no add
      {{3, 10, 7}, 1, {{7, 10}, {0, 2}}},                 // two, the middle axis
  };
  for (const Case& c : cases) {
    TraceContext ctx({});
    Tensor x = ctx.parameter(DType::f32, c.shape, "x");
    // y: the slices side by side along the axis; its cotangent's pieces are theirs.
    std::vector<Tensor> ys;
    for (auto [b, e] : c.ranges) {
      Axes starts(c.shape.size(), 0), limits(c.shape.begin(), c.shape.end());
      starts[c.axis] = b;
      limits[c.axis] = e;
      ys.push_back(slice(x, starts, limits));
    }
    Tensor y = ys.size() == 1 ? ys[0] : concat(ys, c.axis);
    Tensor seed = ctx.parameter(DType::f32, y.shape(), "seed");
    Tensor dx = vjp(y, {x}, seed)[0];
    ctx.graph.outputs = {dx.id()};
    Compiled cc = compile_both(ctx.graph);
    if (c.ranges.size() > 1) {
      // One pass: the concat, or the copy chain (fusion.h) that holds it with the slices'
      // adjoints and the `+ 0`.
      EXPECT_EQ(count_op(*cc.fused, Op::Concat) + count_label(*cc.fused, "copy["), 1)
          << cc.fused->plan_string();
      EXPECT_EQ(count_op(*cc.plain, Op::Concat), 1) << cc.plain->plan_string();
    }
    std::vector<Array> ins = {random_array(DType::f32, c.shape, rng), random_array(DType::f32, y.shape(), rng)};
    add_edge_values(ins[1]);
    const auto fused = run(*cc.fused, ins), plain = run(*cc.plain, ins);
    const auto want = reference(ctx.graph, ins);
    EXPECT_TRUE(same_bits(fused[0], want[0])) << cc.fused->plan_string();
    EXPECT_TRUE(same_bits(plain[0], want[0])) << cc.plain->plan_string();

    // The host loop: element (outer, j, inner) of x gets the seed of the range holding j.
    Array host = Array::full(DType::f32, c.shape, 0.0);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < c.axis; ++d) outer *= c.shape[d];
    for (size_t d = c.axis + 1; d < c.shape.size(); ++d) inner *= c.shape[d];
    const int64_t n = c.shape[c.axis], m = y.shape()[c.axis];
    const float* s = ins[1].data<float>();
    int64_t at = 0;  // the range's offset in the seed
    for (auto [b, e] : c.ranges) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = b; j < e; ++j)
          for (int64_t i = 0; i < inner; ++i) {
            const float v = s[(o * m + at + j - b) * inner + i];
            host.data<float>()[(o * n + j) * inner + i] = c.ranges.size() > 1 ? v + 0.0f : v;
          }
      at += e - b;
    }
    EXPECT_TRUE(same_bits(fused[0], host)) << "axis " << c.axis;
  }
}

TEST(PaddedSums, OverlappingRangesAreAddedAsBefore) {
  std::mt19937 rng(12);
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {4, 20}, "x");
  Tensor seed = ctx.parameter(DType::f32, {4, 16}, "seed");
  Tensor y = concat({slice(x, {0, 0}, {4, 8}), slice(x, {0, 5}, {4, 13})}, 1);
  Tensor dx = vjp(y, {x}, seed)[0];
  ctx.graph.outputs = {dx.id()};
  Compiled cc = compile_both(ctx.graph);
  EXPECT_EQ(count_op(*cc.plain, Op::Concat), 2) << cc.plain->plan_string();
  std::vector<Array> ins = {random_array(DType::f32, {4, 20}, rng), random_array(DType::f32, {4, 16}, rng)};
  const auto want = reference(ctx.graph, ins);
  EXPECT_TRUE(same_bits(run(*cc.fused, ins)[0], want[0]));
  EXPECT_TRUE(same_bits(run(*cc.plain, ins)[0], want[0]));
}

TEST(PaddedSums, IntegerPaddedValuesAreConcatenatedWithoutAnAdd) {
  TraceContext ctx({});
  Tensor a = ctx.parameter(DType::i32, {3, 2}, "a");
  Tensor b = ctx.parameter(DType::i32, {3, 4}, "b");
  Tensor y = concat({full(DType::i32, {3, 1}, 0), a, full(DType::i32, {3, 5}, 0)}, 1) +
             concat({full(DType::i32, {3, 4}, 0), b}, 1);
  ctx.graph.outputs = {y.id()};
  Compiled cc = compile_both(ctx.graph);
  EXPECT_EQ(count_op(*cc.plain, Op::Concat), 1) << cc.plain->plan_string();
  EXPECT_EQ(count_op(*cc.plain, Op::Add), 0) << cc.plain->plan_string();
  Array av(DType::i32, {3, 2}), bv(DType::i32, {3, 4});
  for (int64_t i = 0; i < 6; ++i) av.data<int32_t>()[i] = static_cast<int32_t>(10 + i);
  for (int64_t i = 0; i < 12; ++i) bv.data<int32_t>()[i] = static_cast<int32_t>(-100 - i);
  const auto want = reference(ctx.graph, {av, bv});
  EXPECT_TRUE(same_bits(run(*cc.fused, {av, bv})[0], want[0]));
  EXPECT_TRUE(same_bits(run(*cc.plain, {av, bv})[0], want[0]));
}

}  // namespace
}  // namespace fjit
