// Multi-output elementwise fusion (core/compile/fusion/fusion.h, extra_roots of an elementwise
// group): a group also writes members that are returned or read after it. Oracles: the same
// graph compiled without fusion (bit-identical: the same kernels compute every value), a
// closed form for Adam's first step, and runs whose outputs alias their inputs (donation).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/lib/optimizers.h"
#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

// Fused instructions with further results, over arrays (not the scalar step counter's).
int count_multi_output(const Executable& exe) {
  int n = 0;
  for (const Instr& in : exe.instrs)
    n += in.label.rfind("fused[", 0) == 0 && in.label.find("also writes") != std::string::npos &&
         in.out.size() > 1;
  return n;
}

void expect_bit_equal(const std::vector<Array>& a, const std::vector<Array>& b, const Executable& exe) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(a[k].bit_equal(b[k])) << "output " << k << "\n" << exe.plan_string();
}

// Adam on a matrix and a vector whose sizes are not multiples of the fused block.
struct AdamGraph {
  TraceContext ctx{{}};
  std::vector<Array> ins;
  AdamGraph(std::mt19937& rng, const Adam& opt) {
    const std::vector<std::pair<std::string, Shape>> shapes = {{"w", {37, 1100}}, {"b", {1100}}};
    TensorDict p, g, m, v;
    for (auto* d : {&p, &g, &m, &v})
      for (const auto& [name, s] : shapes) {
        d->set(name, ctx.parameter(DType::f32, s, name));
        // Moments start at zero (Adam's first step, the closed form below); v stays >= 0.
        ins.push_back(d == &m || d == &v ? Array::zeros(DType::f32, s) : random_array(DType::f32, s, rng));
      }
    TensorDict state;
    for (const auto& [name, t] : m) state.set("m." + name, t);
    for (const auto& [name, t] : v) state.set("v." + name, t);
    state.set("step", ctx.parameter(DType::i32, {}, "step"));
    ins.push_back(Array::scalar<int32_t>(0));
    auto [p2, s2] = opt.update(p, g, state);
    for (const auto& [name, t] : p2) ctx.graph.outputs.push_back(t.id());
    for (const auto& [name, t] : s2) ctx.graph.outputs.push_back(t.id());
  }
};

TEST(MultiOutputFusion, AdamIsOnePassPerParameterBitIdenticalToUnfused) {
  std::mt19937 rng(3);
  const Adam opt{.lr = 1e-2};
  AdamGraph a(rng, opt);
  Compiled c = compile_both(a.ctx.graph);
  // One instruction per parameter writes the new parameter and both moments.
  EXPECT_EQ(count_multi_output(*c.fused), 2) << c.fused->plan_string();
  const auto fused = run(*c.fused, a.ins), plain = run(*c.plain, a.ins);
  expect_bit_equal(fused, plain, *c.fused);
  // Closed form of the first step (m, v = 0): m' = (1-b1) g, v' = (1-b2) g^2,
  // p' = p - lr / (1-b1) * m' / (sqrt(v') / sqrt(1-b2) + eps).
  for (int k = 0; k < 2; ++k) {
    const Array &p = a.ins[k], &g = a.ins[2 + k];
    for (int64_t i = 0; i < p.size(); i += 7) {
      const double gi = g.data<float>()[i], m = (1 - opt.b1) * gi, v = (1 - opt.b2) * gi * gi;
      const double want = p.data<float>()[i] - opt.lr.value() / (1 - opt.b1) * m /
                                                    (std::sqrt(v) / std::sqrt(1 - opt.b2) + opt.eps);
      ASSERT_NEAR(fused[k].data<float>()[i], want, 1e-5) << "param " << k << " element " << i;
      ASSERT_NEAR(fused[2 + k].data<float>()[i], m, 1e-6);
      ASSERT_NEAR(fused[4 + k].data<float>()[i], v, 1e-6);
    }
  }
  EXPECT_EQ(fused[6].data<int32_t>()[0], 1);
}

// Donation: the plan lets each new parameter and moment overwrite its old value, and the
// results are the same bits as with separate outputs.
TEST(MultiOutputFusion, AdamResultsMayOverwriteTheirInputs) {
  std::mt19937 rng(5);
  AdamGraph a(rng, Adam{.lr = 1e-2});
  // A second step's state: moments not zero.
  for (int k = 4; k < 8; ++k) a.ins[k] = random_array(DType::f32, a.ins[k].shape(), rng, 0.0, 1.0);
  CompileOptions o;
  auto exe = compile(a.ctx.graph, {}, o);
  ASSERT_EQ(count_multi_output(*exe), 2) << exe->plan_string();
  const std::vector<std::pair<int, int>> donated = {{0, 0}, {1, 1}, {4, 2}, {5, 3}, {6, 4}, {7, 5}};
  for (auto [in, out] : donated) EXPECT_TRUE(exe->can_alias(in, out)) << in << " -> " << out;
  const auto separate = run(*exe, a.ins);
  std::vector<Array> bufs;
  for (const Array& x : a.ins) {
    bufs.emplace_back(x.dtype(), x.shape());
    std::memcpy(bufs.back().raw(), x.raw(), x.size() * dtype_size(x.dtype()));
  }
  std::vector<const void*> in_ptrs;
  for (const Array& x : bufs) in_ptrs.push_back(x.raw());
  Array step_out(DType::i32, {});
  std::vector<void*> out_ptrs(7);
  for (auto [in, out] : donated) out_ptrs[out] = bufs[in].raw();
  out_ptrs[6] = step_out.raw();
  std::vector<std::byte> ws(exe->workspace_bytes() + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t{63});
  RunContext ctx;
  exe->run(in_ptrs.data(), out_ptrs.data(), ctx, aligned);
  for (auto [in, out] : donated) EXPECT_TRUE(bufs[in].bit_equal(separate[out])) << "output " << out;
}

// A member read by an instruction that runs before the group's root stays its own result:
// the group cannot write it in time.
TEST(MultiOutputFusion, ValueReadBeforeTheRootIsNotAFurtherResult) {
  std::mt19937 rng(9);
  TraceContext ctx({});
  Tensor a = ctx.parameter(DType::f32, {64, 300}, "a");
  Tensor x = exp(a) * 2.0;
  Tensor y = sum(x, {1}, true);  // reads x, and the root reads y
  Tensor r = (x + 1.0) * y;
  ctx.graph.outputs = {r.id()};
  Compiled c = compile_both(ctx.graph);
  EXPECT_EQ(count_multi_output(*c.fused), 0) << c.fused->plan_string();
  const std::vector<Array> ins = {random_array(DType::f32, {64, 300}, rng, -1, 1)};
  expect_bit_equal(run(*c.fused, ins), run(*c.plain, ins), *c.fused);
}

// Returned members and members read after the root (a later sum) are written by the group.
TEST(MultiOutputFusion, ReturnedAndLaterReadMembersAreWrittenByTheGroup) {
  std::mt19937 rng(13);
  TraceContext ctx({});
  Tensor a = ctx.parameter(DType::f32, {6, 1000}, "a");
  Tensor b = ctx.parameter(DType::f32, {1000}, "b");
  Tensor x = exp(-abs(a)) * 2.0;
  Tensor z = tanh(x) + b;
  Tensor later = sum(x * 3.0, {0}, false);
  ctx.graph.outputs = {z.id(), x.id(), later.id()};
  Compiled c = compile_both(ctx.graph);
  EXPECT_GE(count_multi_output(*c.fused), 1) << c.fused->plan_string();
  const std::vector<Array> ins = {random_array(DType::f32, {6, 1000}, rng),
                                  random_array(DType::f32, {1000}, rng)};
  expect_bit_equal(run(*c.fused, ins), run(*c.plain, ins), *c.fused);
}

// A value written as a further result (of a row sum that reads it), then added to a broadcast
// of that sum (layer norm's backward): the add takes the broadcast in, a fused step of its own,
// and the broadcast is never written out at full size.
TEST(MultiOutputFusion, AnAddOfABroadcastToAWrittenValueReadsTheBroadcastsOperand) {
  std::mt19937 rng(17);
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {8, 40, 96}, "x");
  Tensor z = ctx.parameter(DType::f32, {8, 40, 96}, "z");
  Tensor y = x * z + x;  // two full operands: written by the row sum's group, not recomputed
  Tensor m = reshape(sum(-y, {2}), {8, 40, 1}) * 0.5;
  Tensor a = y + broadcast_to(m, {8, 40, 96});
  ctx.graph.outputs = {sum(a, {0, 1}).id(), a.id()};
  Compiled c = compile_both(ctx.graph);
  for (const Instr& in : c.fused->instrs) EXPECT_NE(in.op, Op::BroadcastTo) << c.fused->plan_string();
  EXPECT_LT(c.fused->workspace_bytes(), c.plain->workspace_bytes());
  const std::vector<Array> ins = {random_array(DType::f32, {8, 40, 96}, rng),
                                  random_array(DType::f32, {8, 40, 96}, rng)};
  expect_bit_equal(run(*c.fused, ins), run(*c.plain, ins), *c.fused);
}

// Random chains with random members also returned: bit-identical to the unfused plan.
TEST(MultiOutputFusion, RandomProgramsWithSeveralResultsMatchUnfused) {
  std::mt19937 rng(17);
  int multi = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t m = 1 + rng() % 40, n = 1 + rng() % 1500;
    TraceContext ctx({});
    Tensor p = ctx.parameter(DType::f32, {m, n}, "p");
    Tensor q = ctx.parameter(DType::f32, {n}, "q");
    std::vector<Array> ins = {random_array(DType::f32, {m, n}, rng), random_array(DType::f32, {n}, rng)};
    std::vector<Tensor> pool = {p};
    for (int s = 0; s < 3 + static_cast<int>(rng() % 8); ++s) {
      Tensor u = pool[rng() % pool.size()];
      switch (rng() % 5) {
        case 0: pool.push_back(u * q + 1.0); break;
        case 1: pool.push_back(tanh(u) - u); break;
        case 2: pool.push_back(where(u > q, u, q * 0.5)); break;
        case 3: pool.push_back(u / (abs(q) + 1.0)); break;
        case 4: pool.push_back(sqrt(abs(u)) * 3.0); break;
      }
    }
    ctx.graph.outputs = {pool.back().id()};
    for (int k = 0; k < 2; ++k) ctx.graph.outputs.push_back(pool[1 + rng() % (pool.size() - 1)].id());
    if (rng() % 2) ctx.graph.outputs.push_back(sum(pool[1 + rng() % (pool.size() - 1)], {}, false).id());
    Compiled c = compile_both(ctx.graph);
    expect_bit_equal(run(*c.fused, ins), run(*c.plain, ins), *c.fused);
    multi += count_multi_output(*c.fused) > 0;
  }
  EXPECT_GE(multi, 20);
}

}  // namespace
}  // namespace fjit
