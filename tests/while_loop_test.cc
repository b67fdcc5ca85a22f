// while_loop (core/trace/control_flow.h): loops of data-dependent trip count against plain
// host loops, one compiled plan for every trip count, checks that report the iteration, and
// trace errors that name the op and the call site.
#include <gtest/gtest.h>

#include <cmath>

#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

std::string here(int line) { return "tests/while_loop_test.cc:" + std::to_string(line); }

// One Collatz step of every element still above 1; counts the steps each element took.
std::pair<Tensor, Tensor> collatz_step(const std::pair<Tensor, Tensor>& c) {
  const Tensor& n = c.first;
  const Tensor half = n / scalar(DType::i32, 2);
  const Tensor even = eq(n - half * scalar(DType::i32, 2), scalar(DType::i32, 0));
  const Tensor active = n > 1.0;
  const Tensor next = where(active, where(even, half, n * scalar(DType::i32, 3) + scalar(DType::i32, 1)), n);
  return {next, c.second + cast(active, DType::i32)};
}

int32_t host_collatz_steps(int32_t n) {
  int32_t steps = 0;
  for (; n > 1; ++steps) n = n % 2 == 0 ? n / 2 : 3 * n + 1;
  return steps;
}

TEST(WhileLoop, CollatzStepsMatchAHostLoopWithOnePlanForEveryTripCount) {
  auto f = jit([](const Tensor& n0) {
    auto [n, steps] = while_loop([](const std::pair<Tensor, Tensor>& c) { return any(c.first > 1.0); },
                                 collatz_step, std::pair{n0, zeros_like(n0)});
    return std::tuple{n, steps};
  });
  const std::vector<std::vector<int32_t>> inputs = {
      {27, 1, 2, 3, 6, 7, 9, 97}, {1, 1, 1, 1, 1, 1, 1, 1}, {871, 2, 4, 8, 16, 5, 1, 703}};
  for (const auto& v : inputs) {
    auto [n, steps] = f(Array::from_vector<int32_t>(v, {8}));
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_EQ(n.data<int32_t>()[i], 1) << v[i];
      EXPECT_EQ(steps.data<int32_t>()[i], host_collatz_steps(v[i])) << v[i];
    }
  }
  // Trip counts 118 (97), 0 and 178 (871) from the same trace and plan.
  EXPECT_EQ(host_collatz_steps(871), 178);
  EXPECT_EQ(f.core().trace_count(), 1);
}

// Generates until a value passes a limit given at run time: the carry is a dict, cond_fn
// and body_fn capture values of the enclosing trace.
TEST(WhileLoop, GenerateUntilALimitWithDictCarryAndCaptures) {
  auto f = jit([](const Tensor& x0, const Tensor& rate, const Tensor& limit) {
    TensorDict init{{"x", x0}, {"k", scalar(DType::i32, 0)}};
    TensorDict out = while_loop([&](const TensorDict& c) { return c["x"] < limit; },
                                [&](const TensorDict& c) {
                                  return TensorDict{{"x", c["x"] * rate + 0.25}, {"k", c["k"] + scalar(DType::i32, 1)}};
                                },
                                init);
    return std::tuple{out["x"], out["k"]};
  });
  for (double limit : {0.5, 3.0, 1e3, 1e9}) {
    double x = 1.0;
    int k = 0;
    for (; x < limit; ++k) x = x * 1.5 + 0.25;
    auto [gx, gk] = f(Array::scalar(1.0), Array::scalar(1.5), Array::scalar(limit));
    EXPECT_NEAR(gx.item<double>(), x, 1e-12 * x) << limit;
    EXPECT_EQ(gk.item<int32_t>(), k) << limit;
  }
  EXPECT_EQ(f.core().trace_count(), 1);
}

TEST(WhileLoop, CheckInTheBodyReportsTheIteration) {
  JitOptions o;
  o.checks = CheckMode::user;
  o.policy = CheckPolicy::throw_error;
  int loop_line = 0;
  auto f = jit([&](const Tensor& x0, const Tensor& limit) {
    loop_line = __LINE__ + 1;
    return while_loop([&](const Tensor& x) { return x < 1000.0; },
                      [&](const Tensor& x) {
                        Tensor next = x * 2.0;
                        check(next < limit, "x {} reached the limit", next);
                        return next;
                      },
                      x0);
  }, o);
  EXPECT_EQ(f(Array::scalar(1.0), Array::scalar(1e4)).item<double>(), 1024.0);
  // 2^(i+1) in iteration i: 64 at iteration 5 is the first at or above 50.
  const std::string e = error_of<CheckError>([&] { f(Array::scalar(1.0), Array::scalar(50.0)); });
  EXPECT_NE(e.find("x 64 reached the limit (in while_loop iteration 5, the while_loop at "), std::string::npos) << e;
  EXPECT_NE(e.find(here(loop_line) + ")"), std::string::npos) << e;
}

TEST(WhileLoop, MisuseNamesWhileLoopAndTheCallSite) {
  int line = 0;
  auto not_bool = jit([&](const Tensor& x) {
    line = __LINE__ + 1;
    return while_loop([](const Tensor& c) { return sum(c); }, [](const Tensor& c) { return c * 2.0; }, x);
  });
  std::string e = error_of<TraceError>([&] { not_bool(Array::from_vector<double>({1, 2}, {2})); });
  EXPECT_NE(e.find("while_loop"), std::string::npos) << e;
  EXPECT_NE(e.find("cond_fn must return a bool scalar, got (f64[])"), std::string::npos) << e;
  EXPECT_NE(e.find(here(line)), std::string::npos) << e;
  auto retyped = jit([&](const Tensor& x) {
    line = __LINE__ + 1;
    return while_loop([](const Tensor& c) { return sum(c) < 5.0; }, [](const Tensor& c) { return sum(c); }, x);
  });
  e = error_of<TraceError>([&] { retyped(Array::from_vector<double>({1, 2}, {2})); });
  EXPECT_NE(e.find("body_fn returns (f64[]) for the carry (f64[2])"), std::string::npos) << e;
  EXPECT_NE(e.find(here(line)), std::string::npos) << e;
}

}  // namespace
}  // namespace fjit
