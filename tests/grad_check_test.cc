// Gradient check: for every differentiable op of core/ir/ops.def, reverse mode
// (jit(value_and_grad(loss))) against central finite differences, all in float64.
//
// Each case is a function of a few inputs; its loss is sum(w * f(inputs)) with fixed
// pseudo-random weights w, so the cotangent reaching f is not uniform. Finite differences use
// h = 1e-6 (per case where noted); a gradient entry passes when
//   |reverse - finite| <= atol + rtol * |finite|,   atol = rtol = 1e-6 (per case where noted).
// Inputs avoid the kinks of relu/abs/max except in the deliberate tie cases, where central
// differences measure the mean of the one-sided derivatives, which is what the rules return
// for a two-way tie.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "parallel/fjit.h"
#include "parallel/pmap.h"
#include "tests/grad_cases.h"

namespace fjit {
namespace {

using namespace grad_cases;  // NOLINT: the shared cases (tests/grad_cases.h)

TEST(GradCheck, EveryCase) {
  for (const GradCase& c : cases()) {
    SCOPED_TRACE(c.name);
    auto loss = [&c](const Params& p) { return case_loss(c, p); };
    auto fwd = jit(loss);
    auto vg = jit([&](const Params& p) { return value_and_grad(loss)(p); });
    ArrayDict x = make_inputs(c);
    auto [value, grads] = vg(x);
    EXPECT_NEAR(value.item<double>(), fwd(x).item<double>(), 1e-12);
    compare(c, x, grads, [&](const ArrayDict& xp) { return fwd(xp).item<double>(); });
  }
}

// Collectives under a two-replica pmap: every replica's loss is sum(w_r * op(x_r)) with
// replica-dependent weights, and the check is on the total over replicas (what the rules
// differentiate), with x sharded by rows.
TEST(GradCheck, Collectives) {
  Mesh mesh = Mesh::threads(2);
  using Op1 = Tensor (*)(const Tensor&);
  const std::vector<std::pair<std::string, Op1>> ops = {
      {"all_reduce sum", [](const Tensor& x) { return psum(x, "r"); }},
      {"all_reduce max", [](const Tensor& x) { return pmax(x, "r"); }},
      {"all_gather", [](const Tensor& x) { return all_gather(x, "r"); }},
      {"all_gather axis 1", [](const Tensor& x) { return all_gather(x, "r", 1, true); }},
      {"all_gather stacked", [](const Tensor& x) { return all_gather(x, "r", 0, false); }},
      {"psum_scatter", [](const Tensor& x) { return psum_scatter(x, "r", 0, true); }},
      {"psum_scatter untiled", [](const Tensor& x) { return psum_scatter(x, "r"); }},
      {"all_to_all tiled", [](const Tensor& x) { return all_to_all(x, "r", 0, 1, true); }},
      {"all_to_all", [](const Tensor& x) { return all_to_all(x, "r", 0, 1); }},
      {"ppermute swap", [](const Tensor& x) { return ppermute(x, "r", {{0, 1}, {1, 0}}); }},
      {"ppermute one way", [](const Tensor& x) { return ppermute(x, "r", {{1, 0}}); }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    auto local_loss = [op](const Tensor& x) {
      Tensor y = op(x);
      Tensor scale = cast(axis_index("r"), DType::f64) + 1.0;
      return sum(mul(mul(y, weights_like(y)), scale));
    };
    auto total = pmap(mesh, "r", [=](const Tensor& x) { return psum(local_loss(x), "r"); });
    auto grads = pmap(mesh, "r", [=](const Tensor& x) {
      return all_gather(grad(local_loss)(x), "r");  // every replica's rows, in order
    });
    Array x = make_input({{4, 3}}, 7);
    Array g = grads(x);
    GradCase c{name, {}, {}, nullptr};
    ArrayDict xd{{"x", x}}, gd{{"x", g}};
    compare(c, xd, gd, [&](const ArrayDict& xp) { return total(xp.at("x")).item<double>(); });
  }
}

// all_gather over pmap's uneven split (5 rows over 3 replicas: 2, 2, 1): each replica's
// cotangent is its own rows of the summed output cotangents.
TEST(GradCheck, AllGatherOfUnevenShards) {
  Mesh mesh = Mesh::threads(3);
  auto local_loss = [](const Tensor& x) {
    Tensor y = all_gather(x, "r");
    Tensor scale = cast(axis_index("r"), DType::f64) + 1.0;
    return sum(mul(mul(y, y), weights_like(y)) * scale);
  };
  auto total = pmap(mesh, "r", [=](const Tensor& x) { return psum(local_loss(x), "r"); });
  auto grads = pmap(mesh, "r", [=](const Tensor& x) { return all_gather(grad(local_loss)(x), "r"); });
  Array x = make_input({{5, 3}}, 11);
  Array g = grads(x);
  ASSERT_EQ(g.shape(), (Shape{5, 3}));
  GradCase c{"all_gather uneven", {}, {}, nullptr};
  ArrayDict xd{{"x", x}}, gd{{"x", g}};
  compare(c, xd, gd, [&](const ArrayDict& xp) { return total(xp.at("x")).item<double>(); });
}

// Fused attention's backward op has a rule only to refuse: a second derivative through it is
// a TraceError naming dot_product_attention, not a silently zero cotangent.
TEST(GradCheck, AttentionHasNoSecondDerivative) {
  auto f = jit([](const Tensor& q) {
    return grad([](const Tensor& q) {
      return sum(grad([](const Tensor& q) { return sum(dot_product_attention(q, q, q, true)); })(q));
    })(q);
  });
  std::string what;
  try {
    f(make_input({{1, 1, 3, 2}}, 3));
  } catch (const TraceError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("dot_product_attention"), std::string::npos) << what;
  EXPECT_NE(what.find("second derivatives through fused attention are not implemented"), std::string::npos) << what;
}

// A while_loop's trip count is decided at run time: reverse mode through it is a TraceError
// naming the op and the loop's call site (tests/while_loop_test.cc has its forward values).
TEST(GradCheck, WhileLoopRefusesNamingItsCallSite) {
  int line = 0;
  auto f = jit([&](const Tensor& x) {
    return grad([&](const Tensor& x) {
      line = __LINE__ + 1;
      Tensor y = while_loop([](const Tensor& c) { return sum(c) < 10.0; }, [](const Tensor& c) { return c * 2.0; }, x);
      return sum(y);
    })(x);
  });
  try {
    f(Array::from_vector<double>({1, 2}, {2}));
    ADD_FAILURE() << "no TraceError";
  } catch (const TraceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("while_loop: cannot be differentiated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("grad_check_test.cc:" + std::to_string(line)), std::string::npos) << msg;
  }
}

TEST(GradCheck, EveryDifferentiableOpHasARuleAndACase) {
  std::set<Op> covered;
  for (const GradCase& c : cases()) covered.insert(c.ops.begin(), c.ops.end());
  covered.insert({Op::AllReduce, Op::AllGather, Op::ReduceScatter, Op::AllToAll, Op::Permute});  // GradCheck.Collectives
  covered.insert(Op::AttentionGrad);  // GradCheck.AttentionHasNoSecondDerivative
  covered.insert(Op::WhileLoop);  // its rule refuses: GradCheck.WhileLoopRefusesNamingItsCallSite
  std::string missing_rule, missing_case;
  for (int i = 0; i < kNumOps; ++i) {
    const Op op = static_cast<Op>(i);
    if (!op_is_differentiable(op)) {
      EXPECT_EQ(vjp_rule(op), nullptr) << op_name(op);
      continue;
    }
    if (!vjp_rule(op)) missing_rule += std::string(" ") + op_name(op);
    // Sources are the leaves every case differentiates with respect to (parameters) or
    // captures (constants): they have no inputs to propagate to.
    if (op_kind(op) != OpKind::kSource && !covered.count(op)) missing_case += std::string(" ") + op_name(op);
  }
  EXPECT_TRUE(missing_rule.empty()) << "differentiable ops without a VJP rule:" << missing_rule;
  EXPECT_TRUE(missing_case.empty()) << "differentiable ops without a gradient check:" << missing_case;
}

}  // namespace
}  // namespace fjit
