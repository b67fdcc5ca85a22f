// The fpe check mode (checks/fpe_report.h): every-op checks from the CPU's exception flags.
// Each bad case is an op whose IEEE result is known (x/0 = inf, (1e20)^2 overflows f32,
// sqrt(-1) is NaN) and the report must name its kind, its op and its call site; each benign
// case raises a flag on purpose (a discarded quotient, a guarded log) and must report nothing,
// with fusion on and off; a small training step reports nothing on finite data.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/base/threads.h"
#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

JitOptions fpe_options(Fusion fusion = Fusion::all, CheckPolicy policy = CheckPolicy::throw_error) {
  JitOptions o;
  o.name = "fpe_step";
  o.checks = CheckMode::fpe;
  o.policy = policy;
  o.fusion = fusion;
  return o;
}

Array vec(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Array::from_vector(std::move(v), {n});
}

TEST(FpeChecks, ADivisionByZeroIsReportedAtItsOpAndCallSite) {
  constexpr int kLine = __LINE__ + 1;
  auto f = jit([](const Tensor& x, const Tensor& y) { return x / y * 2.0; }, fpe_options());
  EXPECT_EQ(f(vec({1, 2}), vec({4, 8})).data<float>()[1], 0.5f);
  const std::string what = error_of<CheckError>([&] { f(vec({1, 2, 3}), vec({1, 0, 3})); });
  EXPECT_TRUE(has(what, "floating-point division by zero in")) << what;
  EXPECT_TRUE(has(what, "f32[3]")) << what;
  EXPECT_TRUE(has(what, "1 non-finite values in its result, first at flat index 1")) << what;
  EXPECT_TRUE(has(what, "op at tests/fpe_checks_test.cc:" + std::to_string(kLine))) << what;
}

TEST(FpeChecks, OverflowAndInvalidAreNamed) {
  auto e = jit([](const Tensor& x) { return x * x; }, fpe_options());
  EXPECT_TRUE(has(error_of<CheckError>([&] { e(vec({1, 1e20f})); }), "floating-point overflow"));
  auto s = jit([](const Tensor& x) { return sqrt(x) + 1.0; }, fpe_options());
  EXPECT_TRUE(has(error_of<CheckError>([&] { s(vec({4, -1})); }), "floating-point invalid operation"));
}

TEST(FpeChecks, FlagsRaisedOnPurposeAreNotReportedWithFusionOnOrOff) {
  for (Fusion fusion : {Fusion::all, Fusion::off}) {
    // The quotient where the denominator is 0 is discarded; log(0) = -inf is guarded.
    auto f = jit([](const Tensor& x, const Tensor& y) {
      const Tensor safe = where(ne(y, zeros_like(y)), x / y, zeros_like(x));
      const Tensor logs = where(x > 0.0, log(x), zeros_like(x));
      return safe + logs;
    }, fpe_options(fusion));
    Array out = f(vec({0, 2, 3}), vec({0, 0, 3}));
    EXPECT_EQ(out.data<float>()[0], 0.0f);
    EXPECT_EQ(out.data<float>()[1], std::log(2.0f));
    EXPECT_EQ(out.data<float>()[2], 1.0f + std::log(3.0f));
  }
}

TEST(FpeChecks, FlagsOfIntraOpWorkerThreadsAreSeen) {
  const int before = intra_op_threads();
  set_intra_op_threads(4);
  auto f = jit([](const Tensor& x) { return x * x * 0.5; }, fpe_options());
  std::vector<float> v(1 << 21, 1.0f);
  v[v.size() - 3] = 1e20f;  // in the last worker's share: its square overflows
  const std::string what = error_of<CheckError>([&] { f(vec(v)); });
  set_intra_op_threads(before);
  EXPECT_TRUE(has(what, "floating-point overflow")) << what;
  EXPECT_TRUE(has(what, "first at flat index " + std::to_string(v.size() - 3))) << what;
}

TEST(FpeChecks, SkipStepKeepsTheState) {
  auto f = jit([](const Params& p, const Tensor& y) {
    TensorDict next;
    next.set("w", p["w"] / y);
    return next;
  }, fpe_options(Fusion::all, CheckPolicy::skip_step));
  ArrayDict state{{"w", vec({1, 2})}};
  ArrayDict out;
  EXPECT_FALSE(f.run_into(out, state, vec({2, 2})).skipped);
  const ArrayDict before = testing::deep_copy(out);
  ArrayDict next;
  const StepResult r = f.run_into(next, out, vec({0, 2}));
  EXPECT_TRUE(r.skipped);
  EXPECT_TRUE(r.raised(CheckKind::fpe));
  testing::expect_bit_equal(next, before, "state after a skipped step");
}

// A small MLP trained for a few steps (matmul, relu, softmax cross-entropy, their gradients
// and SGD) on finite data raises nothing.
TEST(FpeChecks, NoFalseAlarmInAFewTrainingSteps) {
  auto loss_fn = [](const Params& p, const Tensor& x, const Tensor& y) {
    const Tensor h = relu(matmul(x, p["w1"]) + p["b1"]);
    return mean(softmax_cross_entropy(matmul(h, p["w2"]) + p["b2"], y));
  };
  auto step = jit([&](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
    return std::tuple{sgd(p, g, 0.1), loss};
  }, fpe_options());
  ArrayDict p;
  Array w1(DType::f32, {16, 32}), w2(DType::f32, {32, 10});
  for (int64_t i = 0; i < w1.size(); ++i) w1.data<float>()[i] = 0.05f * static_cast<float>(i % 7) - 0.15f;
  for (int64_t i = 0; i < w2.size(); ++i) w2.data<float>()[i] = 0.04f * static_cast<float>(i % 5) - 0.08f;
  p.set("w1", w1);
  p.set("b1", Array::full(DType::f32, {32}, 0.0));
  p.set("w2", w2);
  p.set("b2", Array::full(DType::f32, {10}, 0.0));
  Array x(DType::f32, {8, 16});
  Array y(DType::i32, {8});
  for (int s = 0; s < 5; ++s) {
    for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>((i * 7 + s) % 11) - 5.0f;
    for (int64_t i = 0; i < y.size(); ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i + s) % 10);
    auto [next, loss] = step(p, x, y);
    EXPECT_TRUE(std::isfinite(loss.item<float>()));
    p = next;
  }
}

}  // namespace
}  // namespace fjit
