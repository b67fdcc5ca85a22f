// User checks end to end (after JAX's checkify tests where they apply): what is reported and
// in which order, root causes, check modes and what they compile to, policies, retracing,
// grad, message formatting, trace-time validation, and no allocation on a passing step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "fjit.h"
#include "tests/alloc_counter.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

// FJIT_CHECKS / FJIT_ON_CHECK_FAILURE are read once, on first use: set them before anything
// asks, record what was parsed, then put the defaults back for the other tests.
struct EnvParsed {
  CheckMode mode;
  CheckPolicy policy;
};
const EnvParsed g_env = [] {
  setenv("FJIT_CHECKS", "all", 1);
  setenv("FJIT_ON_CHECK_FAILURE", "skip_step", 1);
  EnvParsed e{default_check_mode(), default_check_policy()};
  unsetenv("FJIT_CHECKS");
  unsetenv("FJIT_ON_CHECK_FAILURE");
  set_default_check_mode(CheckMode::user);
  set_default_check_policy(CheckPolicy::throw_error);
  return e;
}();

JitOptions opts(CheckMode mode, CheckPolicy policy = CheckPolicy::throw_error, std::string name = "fn") {
  JitOptions o;
  o.name = std::move(name);
  o.checks = mode;
  o.policy = policy;
  return o;
}

Array vec(std::vector<float> v) { return Array::from_vector(v); }

using testing::error_of;

Tensor checked_loss(const Tensor& x) {
  Tensor loss = sum(x * x);
  check(loss < 10.0, "loss {} exceeds 10", loss);
  return loss;
}

TEST(Checks, EnvironmentVariablesAreParsed) {
  EXPECT_EQ(g_env.mode, CheckMode::all);
  EXPECT_EQ(g_env.policy, CheckPolicy::skip_step);
}

TEST(Checks, ErrorNamesMessageValueFunctionAndFile) {
  auto f = jit([](const Tensor& x) { return checked_loss(x); }, opts(CheckMode::user, CheckPolicy::throw_error, "train_step"));
  EXPECT_EQ(f(vec({1, 1})).item<float>(), 2.0f);  // passes
  std::string what = error_of<CheckError>([&] { f(vec({1, 2, 3})); });
  EXPECT_NE(what.find("loss 14 exceeds 10"), std::string::npos) << what;
  EXPECT_NE(what.find("'train_step'"), std::string::npos) << what;
  EXPECT_NE(what.find("checked_loss"), std::string::npos) << what;
  EXPECT_NE(what.find("tests/checks_test.cc:"), std::string::npos) << what;
  EXPECT_NE(what.find("stack at trace time"), std::string::npos) << what;
}

TEST(Checks, TwoChecksBothReportedEarlierFirst) {
  auto f = jit([](const Tensor& x) {
    Tensor s = sum(x);
    check(s < 0.0, "first: sum {} not negative", s);
    Tensor m = max(x);
    check(m < 1.0, "second: max {} too big", m);
    return s + m;
  }, opts(CheckMode::user));
  std::string what = error_of<CheckError>([&] { f(vec({2, 3})); });
  const size_t a = what.find("first: sum 5 not negative"), b = what.find("second: max 3 too big");
  ASSERT_NE(a, std::string::npos) << what;
  ASSERT_NE(b, std::string::npos) << what;
  EXPECT_LT(a, b);
  EXPECT_NE(what.find("#0 [first] [root cause] first:"), std::string::npos) << what;
  EXPECT_NE(what.find("#1 [root cause] second:"), std::string::npos) << what;  // independent
  EXPECT_NE(what.find("2 checks raised"), std::string::npos) << what;
}

TEST(Checks, DownstreamCheckIsNotARootCause) {
  auto f = jit([](const Tensor& x) {
    check(all(x > 0.0), "x must be positive");
    Tensor y = log(x);
    check(all(isfinite(y)), "log(x) must be finite");
    return y;
  }, opts(CheckMode::user));
  f(vec({1, 2}));
  const auto& sites = f.core().last_entry()->exe->check_sites;
  ASSERT_EQ(sites.size(), 2u);
  EXPECT_TRUE(sites[0].upstream.empty());
  EXPECT_EQ(sites[1].upstream, std::vector<int>{0});
  std::string what = error_of<CheckError>([&] { f(vec({-1, 2})); });
  EXPECT_NE(what.find("#0 [first] [root cause] x must be positive"), std::string::npos) << what;
  EXPECT_NE(what.find("#1 log(x) must be finite"), std::string::npos) << what;
  EXPECT_NE(what.find("downstream of raised check #0"), std::string::npos) << what;
}

TEST(Checks, CheckOfAnOlderValueWrittenLaterIsStillTheRootCause) {
  auto f = jit([](const Tensor& x) {
    Tensor y = log(x);
    check(all(isfinite(y)), "log(x) must be finite");
    check(all(x > 0.0), "x must be positive");
    return y;
  }, opts(CheckMode::user));
  std::string what = error_of<CheckError>([&] { f(vec({-1, 2})); });
  EXPECT_NE(what.find("#0 [first] log(x) must be finite"), std::string::npos) << what;
  EXPECT_NE(what.find("#1 [root cause] x must be positive"), std::string::npos) << what;
}

Tensor body(const Tensor& x, bool with_checks) {
  Tensor y = exp(x) * 2.0;
  if (with_checks) check(all(isfinite(y)), "y finite");
  Tensor s = sum(y);
  if (with_checks) check(s < 100.0, "s {}", s);
  return s;
}

int count_check_nodes(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == Op::Check;
  return n;
}

TEST(Checks, ModeOffCompilesNoCheckAtAll) {
  auto with = jit([](const Tensor& x) { return body(x, true); }, opts(CheckMode::off));
  auto without = jit([](const Tensor& x) { return body(x, false); }, opts(CheckMode::off));
  Array x = vec({1, 2, 30});
  EXPECT_TRUE(with(x).bit_equal(without(x)));  // s > 100 raises nothing: nothing is checked
  const Executable& a = *with.core().last_entry()->exe;
  const Executable& b = *without.core().last_entry()->exe;
  EXPECT_EQ(a.num_check_sites(), 0);
  EXPECT_EQ(count_check_nodes(*a.graph), 0);
  EXPECT_EQ(a.graph->to_string(), b.graph->to_string());
  EXPECT_EQ(a.plan_string(), b.plan_string());
}

TEST(Checks, ModeUserCompilesUserChecksOnly) {
  auto f = jit([](const Tensor& x) { return body(x, true); }, opts(CheckMode::user));
  f(vec({1, 2}));
  const Executable& e = *f.core().last_entry()->exe;
  ASSERT_EQ(e.num_check_sites(), 2);
  for (const CheckSite& s : e.check_sites) EXPECT_EQ(s.kind, CheckKind::user);
  EXPECT_EQ(count_check_nodes(*e.graph), 2);
}

TEST(Checks, ModeAllAddsAutomaticChecks) {
  auto f = jit([](const Tensor& x) { return body(x, true); }, opts(CheckMode::all));
  f(vec({1, 2}));
  const Executable& e = *f.core().last_entry()->exe;
  int user = 0, automatic = 0;
  for (const CheckSite& s : e.check_sites) (s.kind == CheckKind::user ? user : automatic)++;
  EXPECT_EQ(user, 2);
  EXPECT_GE(automatic, 3);  // exp, mul, sum
  EXPECT_EQ(count_check_nodes(*e.graph), e.num_check_sites());
}

TEST(Checks, DefaultModeComesFromSetDefaultAndChangingItRecompiles) {
  auto f = jit([](const Tensor& x) { return body(x, true); });
  set_default_check_mode(CheckMode::off);
  f(vec({1, 2}));
  EXPECT_EQ(f.core().last_entry()->exe->num_check_sites(), 0);
  set_default_check_mode(CheckMode::all);
  f(vec({1, 2}));
  EXPECT_GT(f.core().last_entry()->exe->num_check_sites(), 2);
  set_default_check_mode(CheckMode::user);
  EXPECT_EQ(f.core().trace_count(), 2);
  ASSERT_FALSE(f.core().recompile_causes().empty());
  EXPECT_NE(f.core().recompile_causes()[0].find("check mode"), std::string::npos);

  set_default_check_policy(CheckPolicy::log);
  testing::LogCapture logs;
  EXPECT_NO_THROW(f(vec({10, 20})));
  set_default_check_policy(CheckPolicy::throw_error);
  EXPECT_THROW(f(vec({10, 20})), CheckError);
}

// A small training step: forward, grad, SGD.
Tensor mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  Tensor h = tanh(matmul(x, p["w1"]) + p["b1"]);
  Tensor logits = matmul(h, p["w2"]) + p["b2"];
  Tensor loss = mean(softmax_cross_entropy(logits, y));
  check(isfinite(loss), "loss is {}", loss);
  return loss;
}

ArrayDict mlp_params() {
  ArrayDict p;
  auto fill = [](Shape s, float scale) {
    Array a(DType::f32, s);
    for (int64_t i = 0; i < a.size(); ++i) a.data<float>()[i] = scale * std::sin(0.7f * static_cast<float>(i) + 1.0f);
    return a;
  };
  p.set("w1", fill({6, 8}, 0.3f));
  p.set("b1", fill({8}, 0.1f));
  p.set("w2", fill({8, 3}, 0.3f));
  p.set("b2", fill({3}, 0.1f));
  return p;
}

TEST(Checks, OutputsAreBitIdenticalWithChecksOffUserAndAll) {
  auto make = [](CheckMode m) {
    return jit([](const Params& p, const Tensor& x, const Tensor& y) {
      auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
      check(loss < 100.0, "loss {} exploded", loss);
      return std::tuple{g, loss};
    }, opts(m));
  };
  ArrayDict p = mlp_params();
  Array x(DType::f32, {5, 6});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = std::cos(0.3f * static_cast<float>(i));
  Array y = Array::from_vector(std::vector<int32_t>{0, 1, 2, 1, 0});
  auto off = make(CheckMode::off), user = make(CheckMode::user), all = make(CheckMode::all);
  auto [g0, l0] = off(p, x, y);
  auto [g1, l1] = user(p, x, y);
  auto [g2, l2] = all(p, x, y);
  EXPECT_TRUE(l0.bit_equal(l1));
  EXPECT_TRUE(l0.bit_equal(l2));
  for (size_t i = 0; i < g0.size(); ++i) {
    EXPECT_TRUE(g0.value(i).bit_equal(g1.value(i))) << g0.name(i);
    EXPECT_TRUE(g0.value(i).bit_equal(g2.value(i))) << g0.name(i);
  }
}

TEST(Checks, NoRetraceWhetherOrNotChecksRaise) {
  testing::LogCapture logs;
  auto f = jit([](const Tensor& x) { return checked_loss(x); }, opts(CheckMode::user, CheckPolicy::log));
  for (int i = 0; i < 40; ++i) f(vec({static_cast<float>(i % 5), 1}));  // raises when i%5 >= 3
  EXPECT_EQ(f.core().trace_count(), 1);
  auto g = jit([](const Tensor& x) { return checked_loss(x); }, opts(CheckMode::user));
  for (int i = 0; i < 10; ++i) {
    if (i % 3 == 0) EXPECT_THROW(g(vec({5, 5})), CheckError);
    else g(vec({1, 1}));
  }
  EXPECT_EQ(g.core().trace_count(), 1);
}

TEST(Checks, CheckInTheLossFiresUnderValueAndGrad) {
  auto f = jit([](const Tensor& w, const Tensor& x) {
    auto [loss, g] = value_and_grad([](const Tensor& w, const Tensor& x) {
      Tensor l = sum(w * x);
      check(l < 5.0, "loss {} too large", l);
      return l;
    })(w, x);
    return std::tuple{loss, g};
  }, opts(CheckMode::user));
  auto [loss, g] = f(vec({1, 1}), vec({1, 2}));
  EXPECT_EQ(loss.item<float>(), 3.0f);
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{1, 2}));
  std::string what = error_of<CheckError>([&] { f(vec({2, 2}), vec({1, 2})); });
  EXPECT_NE(what.find("loss 6 too large"), std::string::npos) << what;
}

auto sgd_step(CheckPolicy policy) {
  return jit([](const Params& p, const Tensor& x) {
    Tensor loss = sum(p["w"] * x);
    check(isfinite(loss), "loss is {}", loss);
    TensorDict next;
    next.set("w", p["w"] - x * 0.5);
    return std::tuple{next, loss};
  }, opts(CheckMode::user, policy));
}

TEST(Checks, SkipStepKeepsThePreviousStateBitIdentical) {
  testing::LogCapture logs;
  auto step = sgd_step(CheckPolicy::skip_step);
  ArrayDict p{{"w", vec({1, 2, 3})}};
  ArrayDict before{{"w", p["w"].clone()}};
  const int64_t skipped = metrics().steps_skipped.load();
  std::tuple<ArrayDict, Array> out;
  StepResult r = step.run_into(out, p, vec({1, std::numeric_limits<float>::quiet_NaN(), 1}));
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(metrics().steps_skipped.load(), skipped + 1);
  const Array& w = std::get<0>(out)["w"];
  EXPECT_TRUE(w.bit_equal(before["w"]));
  EXPECT_TRUE(w.shares_storage_with(p["w"]));
  EXPECT_TRUE(logs.contains("step skipped")) << logs.text();
  // A good batch then trains as usual.
  r = step.run_into(out, p, vec({2, 2, 2}));
  EXPECT_FALSE(r.skipped);
  EXPECT_EQ(std::get<0>(out)["w"].to_vector<float>(), (std::vector<float>{0, 1, 2}));
}

TEST(Checks, LogPolicyLogsAndContinues) {
  testing::LogCapture logs;
  auto step = sgd_step(CheckPolicy::log);
  ArrayDict p{{"w", vec({1, 2, 3})}};
  const int64_t raised = metrics().checks_raised.load();
  auto [next, loss] = step(p, vec({1, std::numeric_limits<float>::infinity(), 1}));
  EXPECT_TRUE(std::isinf(loss.item<float>()));
  EXPECT_TRUE(std::isinf(next["w"].to_vector<float>()[1]));  // the step's outputs are kept
  EXPECT_EQ(metrics().checks_raised.load(), raised + 1);
  EXPECT_TRUE(logs.contains("loss is inf")) << logs.text();
}

TEST(Checks, ValuesOfEveryDtypeAreFormatted) {
  auto f = jit([](const Tensor& x, const Tensor& n) {
    Tensor s = sum(x);
    check(s < 0.0, "n={} neg={} s={:.2f} d={}", n, s < 0.0, s, cast(s, DType::f64) / 4.0);
    check(sum(n) < 0, "{{literal}} {}", n);
    return s;
  }, opts(CheckMode::user));
  std::string what = error_of<CheckError>([&] { f(vec({0.5f, 1.0f}), Array::scalar<int32_t>(7)); });
  EXPECT_NE(what.find("n=7 neg=false s=1.50 d=0.375"), std::string::npos) << what;
  EXPECT_NE(what.find("{literal} 7"), std::string::npos) << what;
}

TEST(Checks, NonScalarPredicateMeansEveryElement) {
  auto f = jit([](const Tensor& x) {
    check(x > 0.0, "every element positive");
    return x;
  }, opts(CheckMode::user));
  f(vec({1, 2}));
  EXPECT_THROW(f(vec({1, -2})), CheckError);
}

TEST(Checks, MisuseIsATraceErrorNamingTheCallSite) {
  auto expect_trace_error = [](auto fn, const std::string& words) {
    for (CheckMode m : {CheckMode::off, CheckMode::user}) {
      auto f = jit(fn, opts(m));
      try {
        f(vec({1, 2}));
        ADD_FAILURE() << "no TraceError for " << words;
      } catch (const TraceError& e) {
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("checks_test.cc"), std::string::npos) << e.what();
      }
    }
  };
  expect_trace_error([](const Tensor& x) { check(sum(x) > 0.0, "{} and {}", sum(x)); return x; },
                     "2 replacement fields but 1 values");
  expect_trace_error([](const Tensor& x) { check(sum(x) > 0.0, "x {}", x); return x; }, "must be scalars");
  expect_trace_error([](const Tensor& x) { check(sum(x), "not bool"); return x; }, "must be a bool");
  expect_trace_error([](const Tensor& x) { check(sum(x) > 0.0, "{:q}", sum(x)); return x; }, "bad message format");
  EXPECT_THROW(check(Tensor(), "outside"), TraceError);
}

TEST(Checks, PassingCheckedStepAllocatesNothing) {
  for (CheckMode mode : {CheckMode::off, CheckMode::user, CheckMode::all}) {
    for (bool with_grad : {false, true}) {
      auto step = jit([with_grad](const Params& p, const Tensor& x, const Tensor& y) {
        TensorDict g;
        Tensor loss;
        if (with_grad) std::tie(loss, g) = value_and_grad(mlp_loss)(p, x, y);
        else loss = mlp_loss(p, x, y);
        check(loss < 100.0, "loss {} exploded", loss);
        if (!with_grad) g.set("w1", p["w1"] * 0.5);
        return std::tuple{g, loss};
      }, opts(mode));
      ArrayDict p = mlp_params();
      Array x = Array::full(DType::f32, {4, 6}, 0.25);
      Array y = Array::from_vector(std::vector<int32_t>{0, 1, 2, 1});
      std::tuple<ArrayDict, Array> out;
      step.run_into(out, p, x, y);
      step.run_into(out, p, x, y);
      const long before = testing::allocations();
      for (int i = 0; i < 50; ++i) step.run_into(out, p, x, y);
      EXPECT_EQ(testing::allocations() - before, 0) << check_mode_name(mode) << (with_grad ? " grad" : "");
    }
  }
}

}  // namespace
}  // namespace fjit
