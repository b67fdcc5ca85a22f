// scan, fori_loop and cond (core/trace/control_flow.h): values against the same computation
// unrolled with a C++ loop or in closed form, plan size independent of the trip count, and
// trace errors that name the op, the shapes and the call site.
#include <gtest/gtest.h>

#include <cmath>

#include "core/compile/control_flow.h"
#include "parallel/fjit.h"
#include "tests/control_flow_testing.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

using testing::ramp;
using testing::row;

// An RNN cell: h' = tanh(h W + x), y = sum(h') * 0.5.
std::pair<Tensor, Tensor> cell(const Tensor& w, const Tensor& h, const Tensor& x) {
  Tensor next = tanh(matmul(h, w) + x);
  return {next, sum(next) * 0.5};
}

TEST(Scan, MatchesTheUnrolledLoopBitwise) {
  const Array w = ramp({3, 3}, 0.5), h0 = ramp({1, 3}, 1.0), xs = ramp({6, 1, 3}, 0.8, 1.1);
  auto scanned = jit([](const Tensor& w, const Tensor& h0, const Tensor& xs) {
    auto [h, ys] = scan([&](const Tensor& h, const Tensor& x) { return cell(w, h, x); }, h0, xs);
    return std::tuple{h, ys};
  });
  auto unrolled = jit([](const Tensor& w, const Tensor& h0, const Tensor& xs) {
    Tensor h = h0;
    std::vector<Tensor> ys;
    for (int64_t i = 0; i < xs.dim(0); ++i) {
      auto [next, y] = cell(w, h, row(xs, i));
      h = next;
      ys.push_back(reshape(y, {1}));
    }
    return std::tuple{h, concat(ys, 0)};
  });
  auto [h, ys] = scanned(w, h0, xs);
  auto [hu, ysu] = unrolled(w, h0, xs);
  EXPECT_EQ(ys.shape(), (Shape{6}));
  EXPECT_TRUE(h.bit_equal(hu)) << h.to_string(6) << " vs " << hu.to_string(6);
  EXPECT_TRUE(ys.bit_equal(ysu)) << ys.to_string(6) << " vs " << ysu.to_string(6);
}

TEST(Scan, VectorAndDictCarriesAndSeveralXs) {
  // carry {a, b}: a' = a + x1, b' = b * x2; ys: [a', a' * b'] per row.
  const Array x1 = Array::from_vector<double>({1, 2, 3, 4}, {4}), x2 = Array::from_vector<double>({2, 3, 0.5, 4}, {4});
  auto f = jit([](const Tensor& x1, const Tensor& x2) {
    TensorDict init{{"a", scalar(DType::f64, 0.0)}, {"b", scalar(DType::f64, 1.0)}};
    auto [c, ys] = scan([](const TensorDict& c, const std::vector<Tensor>& x) {
      TensorDict next{{"a", c["a"] + x[0]}, {"b", c["b"] * x[1]}};
      return std::pair{next, std::vector<Tensor>{next["a"], next["a"] * next["b"]}};
    }, init, std::vector<Tensor>{x1, x2});
    return std::tuple{c["a"], c["b"], ys[0], ys[1]};
  });
  auto [a, b, y0, y1] = f(x1, x2);
  EXPECT_EQ(a.item<double>(), 10.0);
  EXPECT_EQ(b.item<double>(), 12.0);
  EXPECT_EQ(y0.to_vector<double>(), (std::vector<double>{1, 3, 6, 10}));
  EXPECT_EQ(y1.to_vector<double>(), (std::vector<double>{2, 18, 18, 120}));
}

TEST(Scan, NestedScanAndIntegerCarry) {
  // Outer over rows, inner over the row's elements: a running sum, with an i32 step counter.
  const Array xs = ramp({3, 4}, 1.0);
  auto f = jit([](const Tensor& xs) {
    std::vector<Tensor> init{scalar(DType::f64, 0.0), scalar(DType::i32, 0)};
    auto [c, ys] = scan([](const std::vector<Tensor>& c, const Tensor& r) {
      auto [inner, partial] = scan([](const std::vector<Tensor>& c, const Tensor& v) {
        std::vector<Tensor> next{c[0] + v, c[1] + scalar(DType::i32, 1)};
        return std::pair{next, next[0]};
      }, c, r);
      return std::pair{inner, partial};
    }, init, xs);
    return std::tuple{c[0], c[1], ys};
  });
  auto [total, steps, partials] = f(xs);
  double run = 0;
  std::vector<double> want;
  for (int64_t i = 0; i < xs.size(); ++i) want.push_back(run += xs.data<double>()[i]);
  EXPECT_EQ(total.item<double>(), run);
  EXPECT_EQ(steps.item<int32_t>(), 12);
  EXPECT_EQ(partials.shape(), (Shape{3, 4}));
  EXPECT_EQ(partials.to_vector<double>(), want);
}

// The loop is one instruction running a sub-plan: the plan, its graph and the body's plan are
// the same size for 4 and 4096 iterations.
TEST(Scan, PlanSizeDoesNotGrowWithTheTripCount) {
  struct Size {
    size_t instrs, nodes, body_instrs, workspace;
  };
  auto size_of = [](int64_t n) {
    auto f = jit([](const Tensor& w, const Tensor& h0, const Tensor& xs) {
      auto [h, ys] = scan([&](const Tensor& h, const Tensor& x) { return cell(w, h, x); }, h0, xs);
      return std::tuple{h, fori_loop(0, xs.dim(0), [](const Tensor& i, const Tensor& s) {
        return s * 0.5 + cast(i, DType::f64);
      }, sum(ys))};
    });
    f(ramp({3, 3}, 0.5), ramp({1, 3}, 1.0), ramp({n, 1, 3}, 0.8));
    const Executable& exe = *f.core().last_entry()->exe;
    size_t body = 0;
    for (const Instr& in : exe.instrs)
      if (in.op == Op::Scan) body += static_cast<const ControlPlan*>(in.prepared.get())->plans[0]->instrs.size();
    return Size{exe.instrs.size(), static_cast<size_t>(exe.graph->size()), body, exe.workspace_bytes()};
  };
  const Size small = size_of(4), large = size_of(4096);
  EXPECT_EQ(small.instrs, large.instrs);
  EXPECT_EQ(small.nodes, large.nodes);
  EXPECT_EQ(small.body_instrs, large.body_instrs);
  EXPECT_GT(small.body_instrs, 0u);
  EXPECT_LE(small.instrs, 12u);
}

TEST(ForiLoop, MatchesClosedForms) {
  auto f = jit([](const Tensor& s0) {
    // s_{k+1} = s_k / 2 + i  for i = 3..9, and the sum of i in i32.
    Tensor s = fori_loop(3, 10, [](const Tensor& i, const Tensor& s) { return s * 0.5 + cast(i, DType::f64); }, s0);
    Tensor n = fori_loop(3, 10, [](const Tensor& i, const Tensor& n) { return n + i; }, scalar(DType::i32, 0));
    Tensor none = fori_loop(5, 5, [](const Tensor&, const Tensor& v) { return v * 2.0; }, s0);
    return std::tuple{s, n, none};
  });
  auto [s, n, none] = f(Array::scalar<double>(1.0));
  double want = 1.0;
  for (int i = 3; i < 10; ++i) want = want * 0.5 + i;
  EXPECT_EQ(s.item<double>(), want);
  EXPECT_EQ(n.item<int32_t>(), 42);
  EXPECT_EQ(none.item<double>(), 1.0);
}

TEST(Cond, RunsTheTakenBranchWithCaptures) {
  auto f = jit([](const Tensor& p, const Tensor& x, const Tensor& k) {
    auto [a, b] = cond(p > 0.0,
        [&](const Tensor& x) { return std::pair{x * k, sum(x)}; },
        [&](const Tensor& x) { return std::pair{exp(x), max(x)}; }, x);
    return std::tuple{a, b};
  });
  const Array x = Array::from_vector<double>({1, -2, 3}, {3}), k = Array::scalar<double>(4.0);
  auto [a1, b1] = f(Array::scalar<double>(1.0), x, k);
  EXPECT_EQ(a1.to_vector<double>(), (std::vector<double>{4, -8, 12}));
  EXPECT_EQ(b1.item<double>(), 2.0);
  auto [a2, b2] = f(Array::scalar<double>(-1.0), x, k);
  EXPECT_EQ(a2.to_vector<double>(), (std::vector<double>{std::exp(1.0), std::exp(-2.0), std::exp(3.0)}));
  EXPECT_EQ(b2.item<double>(), 3.0);
  EXPECT_EQ(f.core().trace_count(), 1);
}

// Collectives in a loop body run once per iteration on every replica, in the same order.
// Gradient accumulation inside a data-parallel step: 2 replicas x 4 micro-batches of the
// replica's rows, the mean over replicas taken inside the loop, equals the whole batch.
TEST(ScanUnderPmap, CollectivesInTheBodyAndGradientAccumulation) {
  Mesh mesh = Mesh::threads(2);
  const Array xs = ramp({8, 3}, 1.0), ys = ramp({8, 2}, 0.5, 0.9);
  const ArrayDict p{{"w", ramp({3, 2}, 0.4)}};
  auto mse = [](const Params& q, const Tensor& a, const Tensor& b) { return mean(square(matmul(a, q["w"]) - b)); };
  auto f = pmap(mesh, "r", [&](const Params& q, const Tensor& a, const Tensor& b) {
    auto [c, partial] = scan([](const Tensor& c, const Tensor& r) {
      Tensor next = c + psum(r, "r");
      return std::pair{next, pmax(sum(r), "r")};
    }, zeros_like(reshape(slice(a, {0, 0}, {1, 3}), {3})), a);
    auto [l, g] = accumulate_gradients([](const Params& q, const Tensor& a, const Tensor& b) {
      Tensor loss = mean(square(matmul(a, q["w"]) - b));
      return pmean(loss, "r");  // a collective inside the accumulation loop's body
    }, 4)(q, a, b);
    return std::tuple{c, partial, pmean(g["w"], "r")};
  });
  auto [c, partial, g] = f(p, xs, ys);
  // c: the sum over every row of both shards; partial[i]: the larger row sum of row i of each.
  for (int64_t k = 0; k < 3; ++k) {
    double want = 0;
    for (int64_t r = 0; r < 8; ++r) want += xs.data<double>()[r * 3 + k];
    EXPECT_NEAR(c.data<double>()[k], want, 1e-14);
  }
  for (int64_t i = 0; i < 4; ++i) {
    double a = 0, b = 0;
    for (int64_t k = 0; k < 3; ++k) a += xs.data<double>()[i * 3 + k], b += xs.data<double>()[(i + 4) * 3 + k];
    EXPECT_NEAR(partial.data<double>()[i], std::max(a, b), 1e-14);
  }
  auto whole = jit([&](const Params& q, const Tensor& a, const Tensor& b) { return grad(mse)(q, a, b)["w"]; });
  const Array want = whole(p, xs, ys);
  for (int64_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g.data<double>()[i], want.data<double>()[i], 1e-14);
}

TEST(ControlFlowErrors, NameTheOpTheShapesAndTheCallSite) {
  const Array a = ramp({3}, 1.0), xs = ramp({4, 3}, 1.0), ys = ramp({5, 2}, 1.0);
  std::string e = error_of<TraceError>([&] {
    jit([](const Tensor& c, const Tensor& xs) {
      return std::get<0>(scan([](const Tensor& c, const Tensor& x) { return std::pair{cast(c + x, DType::f32), x}; }, c, xs));
    })(a, xs);
  });
  EXPECT_NE(e.find("scan(f64[3], f64[4,3])"), std::string::npos) << e;
  EXPECT_NE(e.find("carry output 0 is f32[3] but its carry input is f64[3]"), std::string::npos) << e;
  EXPECT_NE(e.find("control_flow_test.cc"), std::string::npos) << e;

  e = error_of<TraceError>([&] {
    jit([](const Tensor& c, const Tensor& xs, const Tensor& ys) {
      return std::get<0>(scan([](const Tensor& c, const std::vector<Tensor>& x) { return std::pair{c, x[0]}; },
                              c, std::vector<Tensor>{xs, ys}));
    })(a, xs, ys);
  });
  EXPECT_NE(e.find("scan(f64[3], f64[4,3], f64[5,2])"), std::string::npos) << e;
  EXPECT_NE(e.find("disagree on their leading extent (4 vs 5)"), std::string::npos) << e;
  EXPECT_NE(e.find("control_flow_test.cc"), std::string::npos) << e;

  e = error_of<TraceError>([&] {
    jit([](const Tensor& p, const Tensor& x) {
      return cond(p > 0.0, [](const Tensor& x) { return x; }, [](const Tensor& x) { return sum(x); }, x);
    })(Array::scalar<double>(1.0), a);
  });
  EXPECT_NE(e.find("cond(bool[], f64[3])"), std::string::npos) << e;
  EXPECT_NE(e.find("the branches return different types: true_fn (f64[3]), false_fn (f64[])"), std::string::npos) << e;
  EXPECT_NE(e.find("control_flow_test.cc"), std::string::npos) << e;

  e = error_of<TraceError>([&] {
    jit([](const Tensor& p, const Tensor& x) {
      return cond(p, [](const Tensor& x) { return x; }, [](const Tensor& x) { return x; }, x);
    })(Array::scalar<double>(1.0), a);
  });
  EXPECT_NE(e.find("the predicate must be a bool scalar, got f64[]"), std::string::npos) << e;
  EXPECT_NE(e.find("control_flow_test.cc"), std::string::npos) << e;

  // The trace is left as it was: the same jit traces again after a failing body.
  int calls = 0;
  auto f = jit([&calls](const Tensor& c, const Tensor& xs) {
    const bool bad = calls++ == 0;
    return std::get<0>(scan([bad](const Tensor& c, const Tensor& x) {
      return std::pair{bad ? reshape(c, {3, 1}) : c + x, x};
    }, c, xs));
  });
  e = error_of<TraceError>([&] { f(a, xs); });
  EXPECT_NE(e.find("carry output 0 is f64[3,1]"), std::string::npos) << e;
  EXPECT_EQ(f(a, xs).to_vector<double>().size(), 3u);
}

}  // namespace
}  // namespace fjit
