// Graph IR: hash-consing (CSE), the passes (shown before and after), printers and verifier.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>

#include "core/compile/passes/pass.h"
#include "fjit.h"

namespace fjit {
namespace {

TEST(Graph, EqualNodesAreHashConsed) {
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {3}, "x");
  Tensor a = exp(x) + 1.0;
  Tensor b = exp(x) + 1.0;
  EXPECT_EQ(a.id(), b.id());
  EXPECT_EQ(ctx.graph.size(), 4);  // x, exp, 1.0, add
}

TEST(Graph, DeadCodeIsRemovedAndPrinted) {
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {3}, "x");
  Tensor dead = tanh(x);
  (void)dead;
  Tensor y = sqrt(x);
  ctx.graph.outputs = {y.id()};
  const std::string before = ctx.graph.to_string();
  Graph g = make_dead_code_elimination()->run(ctx.graph);
  const std::string after = g.to_string();
  EXPECT_NE(before.find("tanh"), std::string::npos);
  EXPECT_EQ(after.find("tanh"), std::string::npos) << after;
  EXPECT_EQ(after, "%0 = parameter f32[3] #0 \"x\"\n%1 = sqrt f32[3] %0\noutputs: %1\n");
}

TEST(Graph, ConstantFoldingUsesReferenceKernels) {
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {2}, "x");
  Tensor c = exp(full(DType::f32, {2}, 0.0)) * 3.0;  // folds to a fill of 3
  ctx.graph.outputs = {(x * c).id()};
  Graph g = optimize(ctx.graph);
  EXPECT_EQ(g.size(), 3) << g.to_string();
  EXPECT_EQ(g.node(1).op, Op::Constant);
  EXPECT_EQ(g.node(1).attrs.scalar, 3.0) << g.to_string();
}

TEST(Graph, SimplificationFoldsTransposeIntoMatmul) {
  TraceContext ctx({});
  Tensor a = ctx.parameter(DType::f32, {4, 3}, "a");
  Tensor b = ctx.parameter(DType::f32, {4, 5}, "b");
  ctx.graph.outputs = {matmul(transpose(a), b).id()};
  Graph g = optimize(ctx.graph);
  ASSERT_EQ(g.size(), 3) << g.to_string();
  EXPECT_EQ(g.node(2).op, Op::MatMul);
  EXPECT_TRUE(g.node(2).attrs.trans_a);
}

TEST(Graph, DotPrinterNamesEveryNode) {
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {3}, "x");
  ctx.graph.outputs = {relu(x).id()};
  std::string dot = ctx.graph.to_dot("t");
  EXPECT_NE(dot.find("digraph \"t\""), std::string::npos);
  EXPECT_NE(dot.find("n0 -> n1"), std::string::npos);
  EXPECT_NE(dot.find("relu"), std::string::npos);
}

TEST(Graph, VerifierRejectsAWrongType) {
  Graph g;
  int p = g.add(Node{Op::Parameter, DType::f32, {3}, {}, {}, {}});
  g.add(Node{Op::Exp, DType::f32, {4}, {p}, {}, {}});
  try {
    g.verify();
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("node %1 = exp f32[4] %0: shape rule infers f32[3]"),
              std::string::npos) << e.what();
  }
}

TEST(Graph, PlanReusesBuffersOfDeadValues) {
  auto f = jit([](const Tensor& x) {
    Tensor h = x;
    for (int i = 0; i < 8; ++i) h = tanh(h) * 0.5;
    return h;
  });
  Array x = Array::full(DType::f32, {1024}, 0.3);
  Array y = f(x);
  auto exe = f.core().last_entry()->exe;
  // 16 intermediate values of 4 KiB each fit in a couple of reused buffers.
  EXPECT_LE(exe->arena_bytes, 2 * 4096u) << exe->plan_string();
  EXPECT_LE(exe->arena_bytes, exe->min_live_bytes * 13 / 10) << exe->plan_string();
  float v = 0.3f;
  for (int i = 0; i < 8; ++i) v = std::tanh(v) * 0.5f;
  EXPECT_NEAR(y.data<float>()[7], v, 1e-6);
}

TEST(Graph, DumpDirWritesBeforeAfterAndPlan) {
  // A folder that does not exist yet is made, as XLA's --xla_dump_to makes its own.
  const std::string dir = ::testing::TempDir() + "/fjit_dump_" + std::to_string(::getpid()) + "/nested";
  CompileOptions o;
  o.name = "dumped";
  o.dump_dir = dir;
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {3}, "x");
  ctx.graph.outputs = {exp(x).id()};
  compile(ctx.graph, {}, o);
  bool found = false;
  for (int n = 0; n < 64 && !found; ++n)
    found = std::ifstream(dir + "/dumped." + std::to_string(n) + ".after.dot").good() &&
            std::ifstream(dir + "/dumped." + std::to_string(n) + ".plan.txt").good();
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace fjit
