// Casts computed inside fused elementwise passes (core/compile/passes/cast_hoisting.cc moves a
// cast before the reshapes and narrowing transposes it reads, and places a narrowing cast right
// after its operand; the fusion then makes it in the pass that computes its operand). Oracles:
// the traced graph, casts in their original places, evaluated node by node by the reference
// kernels (the reference cast rounds each f32 to nearest-even bf16 on its own), and the same
// graph compiled without fusion. Every bf16 result must be bit-identical to both. The programs
// use only correctly rounded ops (add, sub, mul), whose fast and reference kernels agree bit
// for bit. Run with FJIT_ISA=avx2 too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

// Instructions that are a cast alone.
int count_plain_casts(const Executable& exe) {
  int n = 0;
  for (const Instr& in : exe.instrs) n += in.op == Op::Cast && in.label.rfind("fused[", 0) != 0;
  return n;
}

// Values that exercise the rounding: ties either way, NaN, overflow to infinity, denormals.
void add_edge_values(Array& x) {
  const uint32_t bits[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xff800001u, 0x7f7fffffu,
                           0x00000001u, 0x8000ffffu, 0x3f80ffffu, 0x7f800000u, 0x80000000u};
  for (size_t i = 0; i < std::size(bits) && static_cast<int64_t>(i) < x.size(); ++i)
    std::memcpy(x.data<float>() + i * 7 % x.size(), &bits[i], 4);
}

TEST(FusionCast, CastAfterReshapeIsComputedInTheFusedPassWithTheSameBits) {
  std::mt19937 rng(5);
  // [m, r, n] as a norm's output is shaped, cast as the product's [m * r, n] operand; sizes off
  // the fused kernel's blocks too.
  const std::vector<std::array<int64_t, 3>> shapes = {{2, 3, 5}, {4, 64, 384}, {3, 7, 1000}, {1, 1, 4099}};
  for (auto [m, r, n] : shapes) {
    for (bool keep_f32 : {false, true}) {
      TraceContext ctx({});
      Tensor x = ctx.parameter(DType::f32, {m, r, n}, "x");
      Tensor col = ctx.parameter(DType::f32, {m, r, 1}, "col");
      Tensor row = ctx.parameter(DType::f32, {n}, "row");
      Tensor y = x * col * row + row;
      Tensor z = cast(reshape(y, {m * r, n}), DType::bf16);
      ctx.graph.outputs = {z.id()};
      if (keep_f32) ctx.graph.outputs.push_back(y.id());
      Compiled c = compile_both(ctx.graph);
      EXPECT_EQ(count_plain_casts(*c.fused), 0) << c.fused->plan_string();
      EXPECT_EQ(count_label(*c.fused, "fused["), 1) << c.fused->plan_string();
      std::vector<Array> ins = {random_array(DType::f32, {m, r, n}, rng, -300, 300),
                                random_array(DType::f32, {m, r, 1}, rng), random_array(DType::f32, {n}, rng)};
      add_edge_values(ins[0]);
      const auto fused = run(*c.fused, ins), plain = run(*c.plain, ins);
      const auto want = reference(ctx.graph, ins);
      for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_TRUE(fused[k].bit_equal(want[k])) << m << "x" << r << "x" << n << " result " << k;
        EXPECT_TRUE(plain[k].bit_equal(want[k])) << m << "x" << r << "x" << n << " result " << k;
      }
    }
  }
}

// A narrowing cast moves before the transposes and reshapes it reads (the transpose then moves
// bf16); a widening one stays after the transpose.
TEST(FusionCast, NarrowingCastMovesBeforeTransposes) {
  std::mt19937 rng(9);
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {6, 16, 24}, "x");
  Tensor b = ctx.parameter(DType::f32, {24}, "b");
  Tensor y = x * 0.25 - b;
  Tensor narrow = cast(reshape(transpose(y, {1, 0, 2}), {16, 144}), DType::bf16);
  Tensor wide = cast(transpose(narrow, {1, 0}), DType::f64);
  ctx.graph.outputs = {narrow.id(), wide.id()};
  Compiled c = compile_both(ctx.graph);
  const Graph& g = *c.fused->graph;
  int f32_transposes = 0, bf16_transposes = 0;
  for (int id = 0; id < g.size(); ++id) {
    if (g.node(id).op != Op::Transpose) continue;
    (g.node(id).dtype == DType::bf16 ? bf16_transposes : f32_transposes) += 1;
  }
  EXPECT_EQ(f32_transposes, 0) << g.to_string();
  EXPECT_EQ(bf16_transposes, 2) << g.to_string();  // the widening cast stays after its transpose
  EXPECT_EQ(count_plain_casts(*c.fused), 1) << c.fused->plan_string();  // only the widening one
  std::vector<Array> ins = {random_array(DType::f32, {6, 16, 24}, rng), random_array(DType::f32, {24}, rng)};
  add_edge_values(ins[0]);
  const auto fused = run(*c.fused, ins), plain = run(*c.plain, ins);
  const auto want = reference(ctx.graph, ins);
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_TRUE(fused[k].bit_equal(want[k])) << "result " << k << "\n" << c.fused->plan_string();
    EXPECT_TRUE(plain[k].bit_equal(want[k])) << "result " << k;
  }
}

// A value that a column sum (a bias gradient) reads before the cast, in the order the trace
// made them: the cast is placed right after the value (cast_hoisting.cc's placement), so the
// fused pass computing the value makes the cast and writes the value for the sum.
TEST(FusionCast, CastReadAfterAColumnSumIsMadeInTheValuesPass) {
  std::mt19937 rng(17);
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {64, 300}, "x");
  Tensor g = ctx.parameter(DType::f32, {64, 300}, "g");
  Tensor y = x * g + x;
  Tensor bias_grad = sum(y, {0});
  Tensor z = cast(y, DType::bf16);
  ctx.graph.outputs = {bias_grad.id(), z.id()};
  Compiled c = compile_both(ctx.graph);
  EXPECT_EQ(count_plain_casts(*c.fused), 0) << c.fused->plan_string();
  EXPECT_EQ(count_label(*c.fused, "fused["), 1) << c.fused->plan_string();
  std::vector<Array> ins = {random_array(DType::f32, {64, 300}, rng, -300, 300),
                            random_array(DType::f32, {64, 300}, rng)};
  add_edge_values(ins[0]);
  const auto fused = run(*c.fused, ins), plain = run(*c.plain, ins);
  const auto want = reference(ctx.graph, ins);
  // The cast's bits are the reference's; the column sum is the unfused plan's, and the
  // reference's (which sums in another order) within rounding.
  EXPECT_TRUE(fused[1].bit_equal(want[1])) << c.fused->plan_string();
  EXPECT_TRUE(plain[1].bit_equal(want[1]));
  EXPECT_TRUE(fused[0].bit_equal(plain[0])) << c.fused->plan_string();
  EXPECT_LT(max_diff(fused[0], want[0]), 1e-4);  // 64 terms up to 1e5, with cancellation
}

// A bf16 operand widened to f32 is read by the fused pass that uses it (no f32 copy of it is
// written), and a cast back to bf16 at its end: bf16 in, bf16 out, the same bits.
TEST(FusionCast, WideningCastAtTheInputAndNarrowingAtTheOutputFuse) {
  std::mt19937 rng(13);
  for (int64_t n : {7, 1024, 3008}) {
    TraceContext ctx({});
    Tensor xb = ctx.parameter(DType::bf16, {3, n}, "xb");
    Tensor row = ctx.parameter(DType::f32, {n}, "row");
    Tensor y = cast(xb, DType::f32) * row + row;
    Tensor z = cast(reshape(y, {3 * n}), DType::bf16);
    ctx.graph.outputs = {z.id()};
    Compiled c = compile_both(ctx.graph);
    EXPECT_EQ(count_plain_casts(*c.fused), 0) << c.fused->plan_string();
    Array xb_in(DType::bf16, {3, n});
    const Array src = random_array(DType::f32, {3, n}, rng, -5, 5);
    for (int64_t i = 0; i < xb_in.size(); ++i) {  // the top half of each f32: a bf16 value
      uint32_t u;
      std::memcpy(&u, src.data<float>() + i, 4);
      const auto half = static_cast<uint16_t>(u >> 16);
      std::memcpy(static_cast<std::byte*>(xb_in.raw()) + 2 * i, &half, 2);
    }
    std::vector<Array> ins = {xb_in, random_array(DType::f32, {n}, rng, -1e3, 1e3)};
    const auto fused = run(*c.fused, ins), plain = run(*c.plain, ins);
    const auto want = reference(ctx.graph, ins);
    EXPECT_TRUE(fused[0].bit_equal(want[0])) << n << "\n" << c.fused->plan_string();
    EXPECT_TRUE(plain[0].bit_equal(want[0])) << n;
  }
}

}  // namespace
}  // namespace fjit
