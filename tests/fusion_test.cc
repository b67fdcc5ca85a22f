// Fused instructions (core/passes/fusion.h, core/kernels/fused.h) against two oracles: the same
// graph compiled without fusion (elementwise fusion runs the very same kernels, so results
// must be bit-identical) and the reference kernels evaluated node by node (GEMM epilogues
// round differently, so within a tolerance). Shapes include broadcasts and sizes that are not
// a multiple of the fused kernel's block.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/compiler.h"
#include "core/fjit.h"
#include "core/kernels/kernel.h"

namespace fjit {
namespace {

Array random_array(DType t, const Shape& s, std::mt19937& rng, double lo = -2, double hi = 2) {
  Array a(t, s);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < a.size(); ++i) {
    const double v = u(rng);
    switch (t) {
      case DType::f32:
        a.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::f64:
        a.data<double>()[i] = v;
        break;
      case DType::i32:
        a.data<int32_t>()[i] = static_cast<int32_t>(std::lround(v * 10));
        break;
      case DType::boolean:
        a.data<uint8_t>()[i] = v > 0;
        break;
    }
  }
  return a;
}

std::vector<Array> run(const Executable& exe, const std::vector<Array>& ins) {
  std::vector<Array> outs;
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  for (const Array& a : ins) in_ptrs.push_back(a.raw());
  for (const ValueType& t : exe.output_types) {
    outs.emplace_back(t.dtype, t.shape);
    out_ptrs.push_back(outs.back().raw());
  }
  std::vector<std::byte> ws(exe.workspace_bytes() + 64);
  void* aligned =
      reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t{63});
  RunContext ctx;
  exe.run(in_ptrs.data(), out_ptrs.data(), ctx, aligned);
  return outs;
}

// Node-by-node reference evaluation of the optimized graph.
std::vector<Array> reference(const Graph& g, const std::vector<Array>& ins) {
  std::vector<Array> v(g.size());
  for (size_t k = 0; k < g.parameters.size(); ++k) v[g.parameters[k]] = ins[k];
  for (int id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op == Op::Parameter) continue;
    if (n.op == Op::Constant) {
      v[id] = n.attrs.value ? *n.attrs.value : Array::full(n.dtype, n.shape, n.attrs.scalar);
      continue;
    }
    std::vector<Array> args;
    for (int in : n.inputs) args.push_back(v[in]);
    v[id] = reference_eval(n.op, n.attrs, {n.dtype, n.shape}, args);
  }
  std::vector<Array> outs;
  for (int o : g.outputs) outs.push_back(v[o]);
  return outs;
}

double max_diff(const Array& a, const Array& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    double x = 0, y = 0;
    switch (a.dtype()) {
      case DType::f32:
        x = a.data<float>()[i], y = b.data<float>()[i];
        break;
      case DType::f64:
        x = a.data<double>()[i], y = b.data<double>()[i];
        break;
      case DType::i32:
        x = a.data<int32_t>()[i], y = b.data<int32_t>()[i];
        break;
      case DType::boolean:
        x = a.data<uint8_t>()[i], y = b.data<uint8_t>()[i];
        break;
    }
    worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
  }
  return worst;
}

int count_label(const Executable& exe, const std::string& prefix) {
  int n = 0;
  for (const Instr& in : exe.instrs) n += in.label.rfind(prefix, 0) == 0;
  return n;
}

struct Compiled {
  std::shared_ptr<const Executable> fused, plain;
};
Compiled compile_both(const Graph& g) {
  CompileOptions o;
  o.name = "fusion_test";
  Compiled c;
  c.fused = compile(g, {}, o);
  o.fuse = false;
  c.plain = compile(g, {}, o);
  return c;
}

// A chain over a full operand, a row vector, a column and a scalar, in float and double.
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
      if (n < 1024 || n % 16 == 0)  // else rows out of phase (fused_elementwise.cc) may split it
        EXPECT_EQ(c.fused->instrs.back().label.rfind("fused[", 0), 0u) << c.fused->plan_string();
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
      params.push_back(ctx.parameter(DType::f32, s, "p" + std::to_string(k)));
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
  std::vector<int> computed;
  for (const Instr& in : exe->instrs) computed.push_back(in.node);
  auto has = [&](int id) {
    return std::find(computed.begin(), computed.end(), id) != computed.end();
  };
  const Graph& g = *exe->graph;
  for (int id = 0; id < g.size(); ++id) {
    if (g.node(id).op == Op::Exp) continue;  // exp(x) * 2 may fuse: only y itself is read
    if (g.node(id).op == Op::Mul && g.node(id).inputs[0] != id &&
        g.node(g.node(id).inputs[0]).op == Op::Exp)
      EXPECT_TRUE(has(id)) << "y must be materialized for its check\n" << exe->plan_string();
  }
  EXPECT_GE(count_label(*exe, "fused["), 2) << exe->plan_string();
  Array in = Array::full(DType::f32, {4, 300}, 0.25);
  const auto outs = run(*exe, {in});
  const float yv = std::exp(0.25f) * 2.0f, zv = std::max(yv - 1.0f, 0.0f) + 3.0f;
  EXPECT_NEAR(outs[1].data<float>()[17], zv, 1e-5);
  EXPECT_NEAR(outs[0].data<float>()[1199], std::tanh(zv) * 2.0f, 1e-5);
}

// out = p - lr * (a^T g) and friends as one GEMM, against the reference kernels.
TEST(Fusion, GemmEpiloguesMatchReference) {
  std::mt19937 rng(3);
  struct Case {
    int64_t m, k, n;
    bool ta, tb;
    int form;
  };
  // N a multiple of 16: other shapes are left unfused (GemmUpdateRoundsAsTheEpilogue).
  const std::vector<Case> cases = {{37, 19, 32, false, false, 0}, {64, 128, 48, true, false, 0},
                                   {5, 7, 304, false, true, 1},   {128, 33, 64, true, true, 2},
                                   {2, 3, 16, false, false, 3},   {70, 40, 128, false, false, 4}};
  for (DType t : {DType::f32, DType::f64}) {
    for (const Case& cs : cases) {
      TraceContext ctx({});
      const Shape as = cs.ta ? Shape{cs.k, cs.m} : Shape{cs.m, cs.k};
      const Shape bs = cs.tb ? Shape{cs.n, cs.k} : Shape{cs.k, cs.n};
      Tensor a = ctx.parameter(t, as, "a");
      Tensor b = ctx.parameter(t, bs, "b");
      Tensor p = ctx.parameter(t, {cs.m, cs.n}, "p");
      Tensor bias = ctx.parameter(t, {cs.n}, "bias");
      Tensor prod = matmul(cs.ta ? transpose(a) : a, cs.tb ? transpose(b) : b);
      Tensor out;
      switch (cs.form) {
        case 0:
          out = p - prod * 0.01;
          break;  // SGD
        case 1:
          out = 0.5 * prod + p;
          break;
        case 2:
          out = prod * 0.25 + bias;
          break;  // addend broadcast from a row vector
        case 3:
          out = prod * -3.0;
          break;  // alpha only
        case 4:
          out = 2.0 * prod - reshape(bias, {1, cs.n});
          break;
      }
      ctx.graph.outputs = {out.id()};
      Compiled c = compile_both(ctx.graph);
      EXPECT_EQ(count_label(*c.fused, "gemm["), 1) << c.fused->plan_string();
      std::vector<Array> ins = {random_array(t, as, rng), random_array(t, bs, rng),
                                random_array(t, {cs.m, cs.n}, rng), random_array(t, {cs.n}, rng)};
      const double tol = t == DType::f32 ? 1e-5 : 1e-12;
      EXPECT_LT(max_diff(run(*c.fused, ins)[0], reference(*c.fused->graph, ins)[0]), tol)
          << cs.form;
      EXPECT_LT(max_diff(run(*c.plain, ins)[0], reference(*c.fused->graph, ins)[0]), tol)
          << cs.form;
    }
  }
}

// An update whose product is read elsewhere too (a returned sum of squares or product, a
// check on the product and its scaled value) runs as a matmul and an "update" instruction that
// must round exactly as the epilogue does, for every shape the epilogue takes; shapes it
// refuses (N not a multiple of the packet, a depth over one Eigen kc block, tiny products)
// take the plain ops either way.
TEST(Fusion, GemmUpdateRoundsAsTheEpilogue) {
  std::mt19937 rng(13);
  struct Case {
    int64_t m, k, n;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {784, 128, 512, true, false}, {512, 128, 512, true, false}, {64, 64, 128, true, false},
      {128, 512, 512, false, true}, {37, 19, 32, false, false},   {5, 7, 304, false, true},
      {33, 300, 64, true, true},    {100, 2000, 48, true, false}, {70, 40, 129, false, false},
      {3, 4, 5, false, false},      {2, 3, 16, false, false},     {1, 9, 64, false, false}};
  int epilogues = 0;
  for (DType t : {DType::f32, DType::f64}) {
    for (const Case& cs : cases) {
      for (int form = 0; form < 4; ++form) {
        const Shape as = cs.ta ? Shape{cs.k, cs.m} : Shape{cs.m, cs.k};
        const Shape bs = cs.tb ? Shape{cs.n, cs.k} : Shape{cs.k, cs.n};
        auto build = [&](int extra, bool fuse = true) {
          TraceContext ctx({});
          Tensor a = ctx.parameter(t, as, "a");
          Tensor b = ctx.parameter(t, bs, "b");
          Tensor p = ctx.parameter(t, {cs.m, cs.n}, "p");
          Tensor bias = ctx.parameter(t, {cs.n}, "bias");
          Tensor prod = matmul(cs.ta ? transpose(a) : a, cs.tb ? transpose(b) : b);
          Tensor scaled = prod * 0.01;
          Tensor out = form == 0   ? p - scaled
                       : form == 1 ? scaled + bias
                       : form == 2 ? p + scaled
                                   : scaled;
          ctx.graph.outputs = {out.id()};
          if (extra == 1) ctx.graph.outputs.push_back(sum(prod * prod).id());
          if (extra == 2) ctx.graph.outputs.push_back(prod.id());
          if (extra == 3) {  // mode all's automatic checks on the product and its scaling
            Tensor flag = logical_and(all(isfinite(prod)), all(isfinite(scaled)));
            Attrs at;
            at.index = 0;
            ctx.graph.effects.push_back(ctx.graph.add(
                Node{Op::Check, DType::boolean, {}, {flag.id(), scaled.id()}, at, {}}));
          }
          CompileOptions o;
          o.fuse = fuse;
          return compile(ctx.graph, {}, o);
        };
        std::vector<Array> ins = {random_array(t, as, rng), random_array(t, bs, rng),
                                  random_array(t, {cs.m, cs.n}, rng), random_array(t, {cs.n}, rng)};
        auto alone = build(0);
        const bool epilogue = count_label(*alone, "gemm[") == 1;
        epilogues += epilogue;
        const Array want = run(*alone, ins)[0];
        if (cs.m * cs.k * cs.n < 400000)  // the reference GEMM is slow
          EXPECT_LT(max_diff(want, reference(*alone->graph, ins)[0]),
                    t == DType::f32 ? 1e-5 : 1e-12);
        for (int extra = 1; extra <= 3; ++extra) {
          auto shared = build(extra);
          EXPECT_EQ(count_label(*shared, "update["), epilogue ? 1 : 0) << shared->plan_string();
          if (extra == 1) {  // the update also sums the squares: as the unfused sum does
            EXPECT_EQ(shared->plan_string().find("sum(in0 * in0)") != std::string::npos, epilogue)
                << shared->plan_string();
            EXPECT_TRUE(run(*shared, ins)[1].bit_equal(run(*build(1, false), ins)[1]))
                << cs.m << "x" << cs.k << "x" << cs.n << " " << dtype_name(t);
          }
          EXPECT_TRUE(run(*shared, ins)[0].bit_equal(want))
              << cs.m << "x" << cs.k << "x" << cs.n << " form " << form << " extra " << extra << " "
              << dtype_name(t) << "\n"
              << alone->plan_string() << shared->plan_string();
        }
      }
    }
  }
  EXPECT_GE(epilogues, 40);  // most cases above are epilogues
}

// Narrow products (N <= 16 columns, the logits of a classifier and their weight gradient) run
// through a column-major temporary (core/kernels/matmul.cc); SGD on them is left unfused.
TEST(Fusion, NarrowMatmulsMatchReference) {
  std::mt19937 rng(9);
  for (DType t : {DType::f32, DType::f64}) {
    for (int form = 0; form < 4; ++form) {
      const bool ta = form & 1, tb = form & 2;
      const int64_t m = 200, k = 33, n = 10;
      TraceContext ctx({});
      const Shape as = ta ? Shape{k, m} : Shape{m, k};
      const Shape bs = tb ? Shape{n, k} : Shape{k, n};
      Tensor a = ctx.parameter(t, as, "a");
      Tensor b = ctx.parameter(t, bs, "b");
      Tensor p = ctx.parameter(t, {m, n}, "p");
      Tensor prod = matmul(ta ? transpose(a) : a, tb ? transpose(b) : b);
      ctx.graph.outputs = {prod.id(), (p - prod * 0.1).id()};
      Compiled c = compile_both(ctx.graph);
      std::vector<Array> ins = {random_array(t, as, rng), random_array(t, bs, rng),
                                random_array(t, {m, n}, rng)};
      const auto got = run(*c.fused, ins), ref = reference(*c.fused->graph, ins);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LT(max_diff(got[i], ref[i]), t == DType::f32 ? 1e-5 : 1e-12)
            << form << " output " << i;
    }
  }
}

// The product is also used elsewhere: no epilogue, since the product must exist anyway.
TEST(Fusion, GemmWithSecondConsumerIsNotFused) {
  TraceContext ctx({});
  Tensor a = ctx.parameter(DType::f32, {8, 4}, "a");
  Tensor b = ctx.parameter(DType::f32, {4, 6}, "b");
  Tensor p = ctx.parameter(DType::f32, {8, 6}, "p");
  Tensor prod = matmul(a, b);
  ctx.graph.outputs = {(p - prod * 0.1).id(), sum(prod).id()};
  auto exe = compile(ctx.graph, {}, {});
  EXPECT_EQ(count_label(*exe, "gemm["), 0) << exe->plan_string();
}

}  // namespace
}  // namespace fjit
