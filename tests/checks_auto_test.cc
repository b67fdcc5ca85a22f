// Automatic checks (CheckMode::all), after JAX checkify's nan/div/index checks: every class on
// a minimal failing program, attributed to the op and to the line of this file that made it;
// root causes among them; the backward pass; no false alarms on a healthy training step.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/ir/check_upstream.h"
#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

JitOptions all_checks() {
  JitOptions o;
  o.checks = CheckMode::all;
  o.policy = CheckPolicy::throw_error;
  return o;
}

Array vec(std::vector<float> v) { return Array::from_vector(v); }

using testing::error_of;

std::string here(int line) { return "tests/checks_auto_test.cc:" + std::to_string(line); }

// The report line of the raised check whose message starts with `what`, plus the next line
// (where the op was created).
std::string entry(const std::string& report, const std::string& what) {
  const size_t at = report.find("] " + what);
  if (at == std::string::npos) return "";
  const size_t end = report.find('\n', report.find('\n', at) + 1);
  return report.substr(report.rfind('#', at), end == std::string::npos ? std::string::npos : end - report.rfind('#', at));
}

TEST(AutomaticChecks, NanIsAttributedToTheOpThatMadeIt) {
  int line = 0;
  auto f = jit([&](const Tensor& x, const Tensor& y) {
    Tensor a = relu(x);  // moves values: not checked
    line = __LINE__ + 1;
    Tensor p = mul(a, y);
    return p + 1.0;
  }, all_checks());
  f(vec({1, 2}), vec({3, 4}));
  std::string what = error_of<CheckError>([&] { f(vec({0, 2}), vec({kInf, 1})); });
  std::string e = entry(what, "NaN in mul f32[2]");
  EXPECT_NE(e.find("[first] [root cause] NaN in mul f32[2]: 1 NaN and 0 Inf values (first at flat index 0: nan)"),
            std::string::npos) << what;
  EXPECT_NE(e.find(here(line)), std::string::npos) << what;
  // The NaN flowing on into the add raises that op's check too, as a consequence.
  EXPECT_NE(what.find("#1 NaN in add f32[2]"), std::string::npos) << what;
  EXPECT_EQ(what.find("[root cause] NaN in add"), std::string::npos) << what;
}

TEST(AutomaticChecks, InfIsReportedAsInf) {
  int line = 0;
  auto f = jit([&](const Tensor& x) {
    line = __LINE__ + 1;
    Tensor e = exp(x);
    return e;
  }, all_checks());
  std::string what = error_of<CheckError>([&] { f(vec({1, 100, 200})); });
  std::string e = entry(what, "Inf in exp f32[3]");
  EXPECT_NE(e.find("Inf in exp f32[3]: 2 Inf values (first at flat index 1: inf)"), std::string::npos) << what;
  EXPECT_NE(e.find(here(line)), std::string::npos) << what;
}

TEST(AutomaticChecks, DivisionByZero) {
  int line = 0;
  auto f = jit([&](const Tensor& x, const Tensor& y) {
    line = __LINE__ + 1;
    Tensor q = div(x, y);
    return q;
  }, all_checks());
  std::string what = error_of<CheckError>([&] { f(vec({1, 2, 3}), vec({1, 0, 2})); });
  std::string e = entry(what, "division by zero in div f32[3]");
  EXPECT_NE(e.find("[first] [root cause] division by zero in div f32[3]: 1 of 3 denominators are 0 (first at flat index 1)"),
            std::string::npos) << what;
  EXPECT_NE(e.find(here(line)), std::string::npos) << what;
  // The Inf it produced is reported too, as a consequence.
  EXPECT_NE(what.find("#1 Inf in div f32[3]"), std::string::npos) << what;
  EXPECT_EQ(what.find("[root cause] Inf in div"), std::string::npos) << what;
}

TEST(AutomaticChecks, GatherIndexOutOfRange) {
  int line = 0;
  auto f = jit([&](const Tensor& x, const Tensor& i) {
    line = __LINE__ + 1;
    Tensor g = take(x, i);
    return g * 2.0;
  }, all_checks());
  f(vec({1, 2, 3}), Array::from_vector(std::vector<int32_t>{0, 2}));
  std::string what = error_of<CheckError>([&] { f(vec({1, 2, 3}), Array::from_vector(std::vector<int32_t>{0, 5, -1})); });
  std::string e = entry(what, "index out of range in gather f32[3]");
  EXPECT_NE(e.find("2 indices outside [0, 3) (first at flat index 1: 5)"), std::string::npos) << what;
  EXPECT_NE(e.find(here(line)), std::string::npos) << what;
}

// Attention's key lengths: 0 leaves every query row of that batch index with no key (the
// report names the batch index), and a length above Tk is out of range too.
TEST(AutomaticChecks, AttentionKeyLengthOutsideOneToTk) {
  int line = 0;
  auto f = jit([&](const Tensor& q, const Tensor& kv, const Tensor& len) {
    line = __LINE__ + 1;
    Tensor a = dot_product_attention(q, kv, kv, false, len);
    return a;
  }, all_checks());
  const Array q = Array::full(DType::f32, {3, 1, 2, 4}, 0.5), kv = Array::full(DType::f32, {3, 1, 6, 4}, 0.25);
  f(q, kv, Array::from_vector(std::vector<int32_t>{1, 6, 3}));
  std::string what = error_of<CheckError>([&] { f(q, kv, Array::from_vector(std::vector<int32_t>{4, 0, 7})); });
  std::string e = entry(what, "key length outside [1, 6] in attention f32[3,1,2,5]");
  EXPECT_NE(e.find("[first] [root cause] key length outside [1, 6] in attention f32[3,1,2,5]: 2 batch indices, "
                   "first at batch index 1 with key length 0 (a length below 1 leaves every query row"),
            std::string::npos) << what;
  EXPECT_NE(e.find(here(line)), std::string::npos) << what;
}

TEST(AutomaticChecks, CrossEntropyLabelOutOfRangeNamesTheRowAndLabel) {
  int line = 0;
  auto f = jit([&](const Tensor& logits, const Tensor& labels) {
    line = __LINE__ + 1;
    Tensor l = softmax_cross_entropy(logits, labels);
    return sum(l);
  }, all_checks());
  const Array logits = Array::full(DType::f32, {4, 3}, 0.5);
  f(logits, Array::from_vector(std::vector<int32_t>{0, 2, 1, 2}));
  std::string what = error_of<CheckError>([&] { f(logits, Array::from_vector(std::vector<int32_t>{0, 1, 3, -2})); });
  std::string e = entry(what, "label out of range in softmax_xent f32[4]");
  EXPECT_NE(e.find("2 labels outside [0, 3) (first at flat index 2: 3"), std::string::npos) << what;
  EXPECT_NE(e.find(here(line)), std::string::npos) << what;
}

TEST(AutomaticChecks, LogOfNegative) {
  int line = 0;
  auto f = jit([&](const Tensor& x) {
    line = __LINE__ + 1;
    Tensor l = log(x);
    return l;
  }, all_checks());
  f(vec({1, 2}));
  std::string what = error_of<CheckError>([&] { f(vec({1, -2})); });
  std::string e = entry(what, "log of a value below 0 in log f32[2]");
  EXPECT_NE(e.find("[first] [root cause] log of a value below 0 in log f32[2]: 1 operands (first at flat index 1: -2)"),
            std::string::npos) << what;
  EXPECT_NE(e.find(here(line)), std::string::npos) << what;
  EXPECT_NE(what.find(" NaN in log f32[2]"), std::string::npos) << what;  // downstream
  EXPECT_NE(what.find("downstream of raised check"), std::string::npos) << what;
}

TEST(AutomaticChecks, SqrtOfNegative) {
  int line = 0;
  auto f = jit([&](const Tensor& x) {
    line = __LINE__ + 1;
    Tensor r = sqrt(x);
    return r;
  }, all_checks());
  std::string what = error_of<CheckError>([&] { f(vec({-4, 4})); });
  std::string e = entry(what, "sqrt of a negative number in sqrt f32[2]");
  EXPECT_NE(e.find("[root cause] sqrt of a negative number in sqrt f32[2]: 1 operands (first at flat index 0: -4)"),
            std::string::npos) << what;
  EXPECT_NE(e.find(here(line)), std::string::npos) << what;
}

TEST(AutomaticChecks, FiresInTheBackwardPass) {
  int line = 0;
  auto f = jit([&](const Tensor& x) {
    line = __LINE__ + 1;
    auto [loss, g] = value_and_grad([](const Tensor& x) { return sum(sqrt(x)); })(x);
    return std::tuple{loss, g};
  }, all_checks());
  f(vec({1, 4}));
  // sqrt(0) is fine forward; its derivative 0.5 / sqrt(x) divides by zero.
  std::string what = error_of<CheckError>([&] { f(vec({0, 4})); });
  EXPECT_EQ(what.find("in sqrt"), std::string::npos) << what;
  std::string e = entry(what, "division by zero in div f32[2]");
  EXPECT_NE(e.find("[first] [root cause]"), std::string::npos) << what;
  // Gradient ops are built inside fjit: the report names the user's value_and_grad call.
  EXPECT_NE(e.find("op at tests/checks_auto_test.cc:"), std::string::npos) << what;
  EXPECT_NE(what.find("stack at trace time"), std::string::npos) << what;
  (void)line;
}

TEST(AutomaticChecks, InfMadeOnlyInTheBackwardPassIsAttributedToTheGradCall) {
  int line = 0;
  auto f = jit([&](const Tensor& x) {
    line = __LINE__ + 1;
    auto [loss, g] = value_and_grad([](const Tensor& x) { return sum(log(x)); })(x);
    return std::tuple{loss, g};
  }, all_checks());
  f(vec({1, 2}));
  // log(1e-40) = -92.1 is finite; its derivative 1 / 1e-40 overflows f32.
  std::string what = error_of<CheckError>([&] { f(vec({1e-40f, 2})); });
  EXPECT_EQ(what.find("in log f32"), std::string::npos) << what;  // the forward pass is clean
  const size_t at = what.find("[first] [root cause] Inf in ");
  ASSERT_NE(at, std::string::npos) << what;
  EXPECT_NE(what.find("first at flat index 0: inf", at), std::string::npos) << what;
  EXPECT_NE(what.find("op at " + here(line), at), std::string::npos) << what;
}

TEST(AutomaticChecks, SitesFollowPlanOrderAndUpstreamMatchesTheWholeGraphPass) {
  auto f = jit([](const Tensor& x, const Tensor& y) {
    Tensor a = log(x) / y;
    check(all(a < 10.0), "a small");
    return sqrt(exp(a) + 1.0);
  }, all_checks());
  f(vec({1, 2}), vec({1, 2}));
  const Executable& exe = *f.core().last_entry()->exe;
  // Check nodes appear in the compiled graph in site order.
  int last = -1;
  for (const Node& n : exe.graph->nodes())
    if (n.op == Op::Check) {
      EXPECT_EQ(n.attrs.index, last + 1);
      last = static_cast<int>(n.attrs.index);
    }
  EXPECT_EQ(last + 1, exe.num_check_sites());
  // The user check comes after the checks of the ops it reads, which are its upstream.
  int user = -1;
  for (int i = 0; i < exe.num_check_sites(); ++i)
    if (exe.check_sites[i].kind == CheckKind::user) user = i;
  ASSERT_GE(user, 3);
  EXPECT_EQ(exe.check_sites[user].upstream.size(), static_cast<size_t>(user));
}

TEST(AutomaticChecks, TraceTimeUpstreamOfUserChecksAgreesWithTheWholeGraphPass) {
  TraceOptions o;
  o.checks = CheckMode::user;
  TraceContext ctx(o);
  Tensor x = ctx.parameter(DType::f32, {3}, "x");
  Tensor a = exp(x), b = a * 2.0, c = sum(b);
  check(all(isfinite(b)), "b");
  check(all(x < 5.0), "x");
  check(c < 1.0, "c {}", c);
  check(all(isfinite(a)), "a");
  check(any(x > 0.0) && c > 0.0, "x and c");
  std::vector<CheckSite> again = ctx.check_sites;
  link_all_sites(ctx.graph, again);
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(ctx.check_sites[i].upstream, again[i].upstream) << i;
  EXPECT_EQ(ctx.check_sites[0].upstream, (std::vector<int>{1, 3}));  // x and a feed b
  EXPECT_EQ(ctx.check_sites[2].upstream, (std::vector<int>{0, 1, 3}));
}

TEST(AutomaticChecks, DeadValuesAndCheckHelpersAreNotChecked) {
  auto f = jit([](const Tensor& x) {
    Tensor unused = log(x - 10.0);  // dead: never computed, never checked
    (void)unused;
    check(sum(x * x) < 100.0, "norm");  // x*x and its sum only feed the check
    return relu(x);
  }, all_checks());
  f(vec({1, 2}));
  const Executable& exe = *f.core().last_entry()->exe;
  ASSERT_EQ(exe.num_check_sites(), 1);
  EXPECT_EQ(exe.check_sites[0].kind, CheckKind::user);
}

TEST(AutomaticChecks, NoFalseAlarmsOnAHealthyTrainingStep) {
  auto step = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto loss_fn = [](const Params& p, const Tensor& x, const Tensor& y) {
      Tensor h = relu(matmul(x, p["w1"]) + p["b1"]);
      return mean(softmax_cross_entropy(matmul(h, p["w2"]) + p["b2"], y));
    };
    auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
    TensorDict next;
    for (const auto& [k, v] : p) next.set(k, v - g[k] * 0.1);
    return std::tuple{next, loss};
  }, all_checks());
  ArrayDict p{{"w1", Array::full(DType::f32, {4, 8}, 0.1)}, {"b1", Array::full(DType::f32, {8}, 0.0)},
              {"w2", Array::full(DType::f32, {8, 3}, -0.1)}, {"b2", Array::full(DType::f32, {3}, 0.0)}};
  Array x = Array::full(DType::f32, {2, 4}, 0.5);
  Array y = Array::from_vector(std::vector<int32_t>{0, 2});
  for (int i = 0; i < 5; ++i) p = std::get<0>(step(p, x, y));
  EXPECT_GT(step.core().last_entry()->exe->num_check_sites(), 10);
}

}  // namespace
}  // namespace fjit
