// Forward-mode check: for every differentiable op of core/ir/ops.def (the cases of
// tests/grad_cases.h, which the reverse-mode gradient check also runs), jit(jvp(f)) against
// central finite differences along the same tangent, all in float64:
//   |jvp - (f(x + h t) - f(x - h t)) / 2h| <= atol + rtol * |fd|   per output element,
// with each case's h, atol and rtol; and forward against reverse mode: <w, J t> = <J^T w, t>
// for the case's weights w (the gradient of the case's loss), to 1e-10 relative (the case
// through f32: to its rtol).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "parallel/fjit.h"
#include "parallel/pmap.h"
#include "tests/grad_cases.h"

namespace fjit {
namespace {

using namespace grad_cases;  // NOLINT: the shared cases (tests/grad_cases.h)

// Forward mode refuses these (their own tests below).
bool refused(const GradCase& c) { return c.ops.count(Op::CustomVjp) > 0; }

ArrayDict make_tangents(const GradCase& c) {
  ArrayDict d;
  for (size_t i = 0; i < c.ins.size(); ++i) d.set(key(i), make_input({c.ins[i].shape}, 5000 + 31 * i));
  return d;
}

std::vector<Tensor> leaves(const GradCase& c, const Params& p) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < c.ins.size(); ++i) xs.push_back(p[key(i)]);
  return xs;
}

// x + s t, leaf by leaf.
ArrayDict shifted(const ArrayDict& x, const ArrayDict& t, double s) {
  ArrayDict out;
  for (size_t i = 0; i < x.size(); ++i) {
    Array a = x.value(i).clone();
    const Array& ti = t.at(x.name(i));
    for (int64_t e = 0; e < a.size(); ++e) a.data<double>()[e] += s * ti.data<double>()[e];
    out.set(x.name(i), a);
  }
  return out;
}

TEST(JvpCheck, EveryCase) {
  for (const GradCase& c : cases()) {
    if (refused(c)) continue;
    SCOPED_TRACE(c.name);
    auto f = jit([&c](const Params& p) { return c.f(leaves(c, p)); });
    auto fj = jit([&c](const Params& p, const Params& t) {
      auto [y, ty] = jvp([&c](const std::vector<Tensor>& xs) { return c.f(xs); }, leaves(c, p), leaves(c, t));
      // Reverse mode on the same function: <w, J t> against <J^T w, t>.
      Params g = grad([&c](const Params& q) { return case_loss(c, q); })(p);
      Tensor gt = scalar(DType::f64, 0.0);
      for (size_t i = 0; i < c.ins.size(); ++i) gt = gt + sum(mul(g[key(i)], t[key(i)]));
      return std::tuple{y, ty, sum(mul(ty, weights_like(ty))), gt};
    });
    const ArrayDict x = make_inputs(c), t = make_tangents(c);
    auto [y, ty, wjt, jtwt] = fj(x, t);
    const Array y0 = f(x), up = f(shifted(x, t, c.h)), down = f(shifted(x, t, -c.h));
    ASSERT_EQ(ty.shape(), y0.shape());
    for (int64_t e = 0; e < ty.size(); ++e) {
      EXPECT_EQ(y.data<double>()[e], y0.data<double>()[e]) << "primal [" << e << "]";
      const double fd = (up.data<double>()[e] - down.data<double>()[e]) / (2 * c.h);
      EXPECT_NEAR(ty.data<double>()[e], fd, c.atol + c.rtol * std::abs(fd)) << "tangent [" << e << "]";
    }
    const double a = wjt.item<double>(), b = jtwt.item<double>();
    // Exact up to rounding, in f64; the case through f32 to its own tolerance.
    const double tol = c.rtol > 1e-6 ? c.rtol : 1e-10;
    EXPECT_NEAR(a, b, tol * (1 + std::abs(b))) << "<w, J t> vs <J^T w, t>";
  }
}

// The mixed-precision policy's bf16 values (casts to bf16, a bf16 product with an f32 result)
// carry f32 tangents: the tangent of x -> cast(x) @ cast(w) (linear in x) is cast(t) @ cast(w),
// the same product, bit for bit.
TEST(JvpCheck, Bf16ProductsCarryF32Tangents) {
  auto f = jit([](const Tensor& x, const Tensor& w, const Tensor& t) {
    auto g = [&](const Tensor& x) { return matmul(cast(x, DType::bf16), cast(w, DType::bf16), DType::f32); };
    auto [y, ty] = jvp(g, x, t);
    return std::tuple{ty, g(t)};
  });
  auto f32 = [](Array a) {
    Array o(DType::f32, a.shape());
    for (int64_t i = 0; i < a.size(); ++i) o.data<float>()[i] = static_cast<float>(a.data<double>()[i]);
    return o;
  };
  const Array x = f32(make_input({{3, 4}}, 1)), w = f32(make_input({{4, 2}}, 2)), t = f32(make_input({{3, 4}}, 3));
  auto [ty, expect] = f(x, w, t);
  ASSERT_EQ(ty.dtype(), DType::f32);
  for (int64_t e = 0; e < ty.size(); ++e) EXPECT_EQ(ty.data<float>()[e], expect.data<float>()[e]) << e;
}

// while_loop, which reverse mode refuses, has a tangent: the loop carries it.
TEST(JvpCheck, WhileLoopCarriesTheTangent) {
  auto f = [](const Tensor& x) {
    return while_loop([](const Tensor& c) { return sum(c) < 10.0; }, [](const Tensor& c) { return sin(c) + c * 2.0; }, x);
  };
  auto fj = jit([&](const Tensor& x, const Tensor& t) {
    auto [y, ty] = jvp(f, x, t);
    return std::tuple{y, ty};
  });
  auto fwd = jit(f);
  const Array x = Array::from_vector<double>({0.3, 0.7}, {2}), t = Array::from_vector<double>({1.0, -0.5}, {2});
  auto [y, ty] = fj(x, t);
  const double h = 1e-6;
  Array xu = x.clone(), xd = x.clone();
  for (int e = 0; e < 2; ++e) {
    xu.data<double>()[e] += h * t.data<double>()[e];
    xd.data<double>()[e] -= h * t.data<double>()[e];
  }
  const Array up = fwd(xu), down = fwd(xd);
  for (int e = 0; e < 2; ++e) {
    const double fd = (up.data<double>()[e] - down.data<double>()[e]) / (2 * h);
    EXPECT_NEAR(ty.data<double>()[e], fd, 1e-6 + 1e-6 * std::abs(fd)) << e;
  }
}

// Collectives under a two-replica pmap: the tangent of every replica's output (all gathered)
// against central differences of the whole input along the tangent.
TEST(JvpCheck, Collectives) {
  Mesh mesh = Mesh::threads(2);
  using Op1 = Tensor (*)(const Tensor&);
  const std::vector<std::pair<std::string, Op1>> ops = {
      {"all_reduce sum", [](const Tensor& x) { return psum(x * x, "r"); }},
      {"all_reduce max", [](const Tensor& x) { return pmax(x, "r"); }},
      {"all_gather", [](const Tensor& x) { return all_gather(sin(x), "r"); }},
      {"all_gather axis 1", [](const Tensor& x) { return all_gather(x * x, "r", 1, true); }},
      {"psum_scatter", [](const Tensor& x) { return psum_scatter(x * x, "r", 0, true); }},
      {"all_to_all", [](const Tensor& x) { return all_to_all(sin(x), "r", 0, 1, true); }},
      {"ppermute", [](const Tensor& x) { return ppermute(x * x, "r", {{0, 1}, {1, 0}}); }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    auto fwd = pmap(mesh, "r", [=](const Tensor& x) { return all_gather(op(x), "r"); });
    auto tan = pmap(mesh, "r", [=](const Tensor& x, const Tensor& t) {
      return all_gather(jvp(op, x, t).second, "r");
    });
    const Array x = make_input({{4, 3}}, 7), t = make_input({{4, 3}}, 8);
    const Array ty = tan(x, t);
    const double h = 1e-6;
    ArrayDict xd{{"x", x}}, td{{"x", t}};
    const Array up = fwd(shifted(xd, td, h).at("x")), down = fwd(shifted(xd, td, -h).at("x"));
    ASSERT_EQ(ty.shape(), up.shape());
    for (int64_t e = 0; e < ty.size(); ++e) {
      const double fd = (up.data<double>()[e] - down.data<double>()[e]) / (2 * h);
      EXPECT_NEAR(ty.data<double>()[e], fd, 1e-6 + 1e-6 * std::abs(fd)) << e;
    }
  }
}

std::string trace_error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const TraceError& e) {
    return e.what();
  }
  return "no TraceError";
}

// As in JAX, a custom_vjp function has no forward mode: a TraceError naming it.
TEST(JvpCheck, CustomVjpRefuses) {
  auto g = custom_vjp([](const Tensor& a) { Tensor t = tanh(a); return std::pair{t, t}; },
                      [](const Tensor& t, const Tensor& ct) { return ct * (1.0 - t * t); });
  auto f = jit([&](const Tensor& x) { return jvp(g, x, x).second; });
  const std::string what = trace_error_of([&] { f(make_input({{2}}, 1)); });
  EXPECT_NE(what.find("custom_vjp: cannot be differentiated in forward mode"), std::string::npos) << what;
  EXPECT_NE(what.find("jvp_check_test.cc"), std::string::npos) << what;
}

// Fused attention's backward op has no JVP: forward over reverse through it (a Hessian) is a
// TraceError naming dot_product_attention, not a silently zero tangent.
TEST(JvpCheck, FusedAttentionHasNoSecondDerivative) {
  auto f = jit([](const Tensor& q) {
    return hvp([](const Tensor& q) { return sum(dot_product_attention(q, q, q, true)); })(q, q);
  });
  const std::string what = trace_error_of([&] { f(make_input({{1, 1, 3, 2}}, 3)); });
  EXPECT_NE(what.find("second derivatives through fused attention are not implemented"), std::string::npos) << what;
  EXPECT_NE(what.find("dot_product_attention"), std::string::npos) << what;
}

TEST(JvpCheck, BadTangentIsATraceError) {
  auto f = jit([](const Tensor& x, const Tensor& t) { return jvp([](const Tensor& x) { return sin(x); }, x, t).second; });
  const std::string what = trace_error_of([&] { f(make_input({{2, 3}}, 1), make_input({{3}}, 2)); });
  EXPECT_NE(what.find("jvp"), std::string::npos) << what;
  EXPECT_NE(what.find("f64[2,3] but its tangent is f64[3]"), std::string::npos) << what;
}

TEST(JvpCheck, EveryDifferentiableOpHasAJvpRuleAndACase) {
  std::set<Op> covered;
  for (const GradCase& c : cases())
    if (!refused(c)) covered.insert(c.ops.begin(), c.ops.end());
  covered.insert({Op::AllReduce, Op::AllGather, Op::ReduceScatter, Op::AllToAll, Op::Permute});  // JvpCheck.Collectives
  covered.insert({Op::AttentionGrad});                            // JvpCheck.FusedAttentionHasNoSecondDerivative
  covered.insert({Op::CustomVjp});                                 // JvpCheck.CustomVjpRefuses
  covered.insert({Op::WhileLoop});                                 // JvpCheck.WhileLoopCarriesTheTangent
  std::string missing_rule, missing_case;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    EXPECT_EQ(jvp_rule(op) != nullptr, op_is_differentiable(op)) << op_name(op);
    if (!op_is_differentiable(op)) continue;
    if (op_kind(op) != OpKind::kSource && !covered.count(op)) missing_case += std::string(" ") + op_name(op);
  }
  EXPECT_TRUE(missing_case.empty()) << "differentiable ops without a JVP check:" << missing_case;
}

}  // namespace
}  // namespace fjit
