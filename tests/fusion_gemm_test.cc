// GEMM updates and narrow matmuls: fused SGD updates against the reference, the same update
// whichever further results (the product, the sum of its squares) the instruction writes,
// and what a GEMM whose product is read elsewhere does.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/kernels/fused/fused.h"
#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

TEST(Fusion, GemmEpiloguesMatchReference) {
  std::mt19937 rng(3);
  struct Case {
    int64_t m, k, n;
    bool ta, tb;
    int form;
  };
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
// check on the product and its scaled value) is the same blocked GEMM instruction writing
// those further results: its update must be bit-identical to the one that writes nothing
// else, for every shape (several kc blocks of depth, odd N, tiny and one-row products), and
// its sum of squares within rounding of the exact one (bit-identical to the unfused sum when
// the depth takes several kc blocks and the squares are summed as reduce.cc sums them).
bool in_epilogue(const Executable& exe) {
  for (const Instr& in : exe.instrs)
    if (in.label.rfind("gemm[", 0) == 0) return gemm_update_in_epilogue(in);
  return false;
}

double exact_sum_of_squares(const Array& a) {
  long double s = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    const long double v = a.dtype() == DType::f32 ? a.data<float>()[i] : a.data<double>()[i];
    s += v * v;
  }
  return static_cast<double>(s);
}

double scalar_of(const Array& a) { return a.dtype() == DType::f32 ? a.data<float>()[0] : a.data<double>()[0]; }

TEST(Fusion, GemmUpdateIsTheSameWhateverElseItWrites) {
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
  int epilogues = 0, store_path = 0;
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
          o.fusion = fuse ? Fusion::all : Fusion::off;
          return compile(ctx.graph, {}, o);
        };
        std::vector<Array> ins = {random_array(t, as, rng), random_array(t, bs, rng),
                                  random_array(t, {cs.m, cs.n}, rng), random_array(t, {cs.n}, rng)};
        auto alone = build(0);
        const bool epilogue = count_label(*alone, "gemm[") == 1;
        epilogues += epilogue;
        store_path += in_epilogue(*alone);
        const Array want = run(*alone, ins)[0];
        if (cs.m * cs.k * cs.n < 400000) {  // the reference GEMM is slow
          EXPECT_LT(max_diff(want, reference(*alone->graph, ins)[0]),
                    t == DType::f32 ? 1e-5 : 1e-12);
        }
        // The product as the group computes it, and the unfused sum of its squares.
        const Array product = run(*build(2), ins)[1];
        Array unfused_sum;
        {
          TraceContext ctx({});
          Tensor x = ctx.parameter(t, product.shape(), "x");
          ctx.graph.outputs = {sum(x * x).id()};
          CompileOptions o;
          o.fusion = Fusion::off;
          unfused_sum = run(*compile(ctx.graph, {}, o), {product})[0];
        }
        for (int extra = 1; extra <= 3; ++extra) {
          auto shared = build(extra);
          EXPECT_EQ(count_label(*shared, "gemm["), epilogue ? 1 : 0) << shared->plan_string();
          if (extra == 1) {
            EXPECT_EQ(shared->plan_string().find("sum of its squares") != std::string::npos, epilogue)
                << shared->plan_string();
            // The epilogue path adds the squares in the panel kernel's order of stores, the
            // scratch path in reduce.cc's: bit-identical to the unfused sum only on the latter.
            const Array fused_sum = run(*shared, ins)[1];
            if (!in_epilogue(*shared)) {
              EXPECT_TRUE(fused_sum.bit_equal(unfused_sum))
                  << cs.m << "x" << cs.k << "x" << cs.n << " " << dtype_name(t);
            }
            const double exact = exact_sum_of_squares(product);
            EXPECT_NEAR(scalar_of(fused_sum), exact, exact * (t == DType::f32 ? 1e-5 : 1e-13))
                << cs.m << "x" << cs.k << "x" << cs.n << " " << dtype_name(t);
          }
          EXPECT_TRUE(run(*shared, ins)[0].bit_equal(want))
              << cs.m << "x" << cs.k << "x" << cs.n << " form " << form << " extra " << extra << " "
              << dtype_name(t) << "\n"
              << alone->plan_string() << shared->plan_string();
        }
        if (epilogue && cs.m * cs.k * cs.n < 400000) {
          EXPECT_LT(max_diff(product, reference(*build(2)->graph, ins)[1]),
                    t == DType::f32 ? 1e-4 : 1e-11);
        }
      }
    }
  }
  EXPECT_EQ(epilogues, 2 * 12 * 4);  // every case above is fused
  // Both paths are covered: the depth of 2000 takes several kc blocks, a batch of 128 one.
  EXPECT_GT(store_path, 0);
  EXPECT_LT(store_path, epilogues);
}

// A scale read at run time (pmean's replica weight over n, a scalar computed before the
// matmul) is the GEMM's alpha: one instruction, matching the reference, for s * A B, p + s * A B
// and (stopping at the scaled product) p - s * A B.
TEST(Fusion, GemmTakesARuntimeScalarAsAlpha) {
  std::mt19937 rng(21);
  for (int form = 0; form < 3; ++form) {
    TraceContext ctx({});
    Tensor s = ctx.parameter(DType::f32, {}, "s");
    Tensor half = s * 0.5;  // computed before the matmul, as pmap builds pmean's scale
    Tensor a = ctx.parameter(DType::f32, {40, 64}, "a");
    Tensor b = ctx.parameter(DType::f32, {40, 32}, "b");
    Tensor p = ctx.parameter(DType::f32, {64, 32}, "p");
    Tensor scaled = matmul(transpose(a), b) * half;
    Tensor out = form == 0 ? scaled : form == 1 ? p + scaled : p - scaled;
    ctx.graph.outputs = {out.id()};
    auto exe = compile(ctx.graph, {}, {});
    EXPECT_EQ(count_label(*exe, "gemm["), 1) << exe->plan_string();
    // alpha is the last operand: in2 (s * A B), in3 (p + s * A B)
    EXPECT_NE(exe->plan_string().find(form == 1 ? "= in2 + in3 * in0^T in1" : "= in2 * in0^T in1"),
              std::string::npos)
        << exe->plan_string();
    std::vector<Array> ins = {random_array(DType::f32, {}, rng), random_array(DType::f32, {40, 64}, rng),
                              random_array(DType::f32, {40, 32}, rng), random_array(DType::f32, {64, 32}, rng)};
    EXPECT_LT(max_diff(run(*exe, ins)[0], reference(*exe->graph, ins)[0]), 1e-4) << form;
  }
}

// Narrow products (N <= 16 columns, the logits of a classifier and their weight gradient) run
// through a column-major temporary (core/kernels/gemm/matmul.cc); SGD on them is left unfused.
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

// The product is also used elsewhere: the update's instruction writes it out as well, and
// both results match the reference.
TEST(Fusion, GemmWithSecondConsumerWritesTheProduct) {
  std::mt19937 rng(5);
  TraceContext ctx({});
  Tensor a = ctx.parameter(DType::f32, {8, 4}, "a");
  Tensor b = ctx.parameter(DType::f32, {4, 6}, "b");
  Tensor p = ctx.parameter(DType::f32, {8, 6}, "p");
  Tensor prod = matmul(a, b);
  ctx.graph.outputs = {(p - prod * 0.1).id(), sum(prod).id()};
  auto exe = compile(ctx.graph, {}, {});
  EXPECT_EQ(count_label(*exe, "gemm["), 1) << exe->plan_string();
  EXPECT_NE(exe->plan_string().find("%" + std::to_string(prod.id()) + " = in0 in1"), std::string::npos)
      << exe->plan_string();
  std::vector<Array> ins = {random_array(DType::f32, {8, 4}, rng), random_array(DType::f32, {4, 6}, rng),
                            random_array(DType::f32, {8, 6}, rng)};
  const auto got = run(*exe, ins), ref = reference(*exe->graph, ins);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(max_diff(got[i], ref[i]), 1e-5) << i;
}

}  // namespace
}  // namespace fjit
