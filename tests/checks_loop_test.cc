// Checks inside loop bodies and branches (core/trace/control_flow.h): a user check or an
// automatic check raised in iteration i of a scan or fori_loop reports i, and the line of the
// loop; checks in a cond's branch report only when their branch ran.
#include <gtest/gtest.h>

#include <cmath>

#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

JitOptions checks(CheckMode mode) {
  JitOptions o;
  o.checks = mode;
  o.policy = CheckPolicy::throw_error;
  return o;
}

std::string here(int line) { return "tests/checks_loop_test.cc:" + std::to_string(line); }

TEST(LoopChecks, UserCheckReportsTheScanIteration) {
  int loop_line = 0, check_line = 0;
  auto f = jit([&](const Tensor& xs) {
    loop_line = __LINE__ + 1;
    auto [c, ys] = scan([&](const Tensor& c, const Tensor& x) {
      Tensor next = c + x;
      check_line = __LINE__ + 1;
      check(next < 100.0, "running sum {} reached 100", next);
      return std::pair{next, next};
    }, scalar(DType::f64, 0.0), xs);
    return c;
  }, checks(CheckMode::user));
  std::vector<double> ones(40, 1.0), steps(40, 1.0);
  EXPECT_EQ(f(Array::from_vector<double>(ones, {40})).item<double>(), 40.0);
  steps[17] = 90;  // the sum is 17 + 90 = 107 at iteration 17, and stays above after
  const std::string e = error_of<CheckError>([&] { f(Array::from_vector<double>(steps, {40})); });
  EXPECT_NE(e.find("running sum 107 reached 100 (in scan iteration 17, the scan at "), std::string::npos) << e;
  EXPECT_NE(e.find(here(loop_line) + ")"), std::string::npos) << e;
  EXPECT_NE(e.find(here(check_line)), std::string::npos) << e;
}

TEST(LoopChecks, AutomaticNanCheckInABodyReportsTheIteration) {
  int log_line = 0;
  auto f = jit([&](const Tensor& xs) {
    return fori_loop(0, 30, [&](const Tensor& i, const Tensor& acc) {
      Tensor x = take(xs, reshape(i, {1}));
      log_line = __LINE__ + 1;
      return acc + sum(log(x));
    }, scalar(DType::f64, 0.0));
  }, checks(CheckMode::all));
  std::vector<double> v(30, 2.0);
  EXPECT_NEAR(f(Array::from_vector<double>(v, {30})).item<double>(), 30 * std::log(2.0), 1e-12);
  v[23] = -1.0;
  const std::string e = error_of<CheckError>([&] { f(Array::from_vector<double>(v, {30})); });
  EXPECT_NE(e.find("log of a value below 0 in log f64[1]: 1 operands (first at flat index 0: -1) "
                   "(in fori_loop iteration 23"), std::string::npos) << e;
  EXPECT_NE(e.find(here(log_line)), std::string::npos) << e;
}

TEST(LoopChecks, NestedLoopsReportTheInnermostIterationAndBranchesOnlyWhenTaken) {
  auto f = jit([](const Tensor& m, const Tensor& p) {
    auto [c, ys] = scan([&](const Tensor& c, const Tensor& r) {
      auto [inner, unused] = scan([&](const Tensor& c, const Tensor& v) {
        Tensor next = cond(p > 0.0,
            [](const Tensor& v) {
              check(ne(v, scalar(DType::f64, 7.0)), "seven {}", v);
              return v;
            },
            [](const Tensor& v) { return v * 2.0; }, v);
        return std::pair{c + next, v};
      }, c, r);
      return std::pair{inner, inner};
    }, scalar(DType::f64, 0.0), m);
    return c;
  }, checks(CheckMode::user));
  std::vector<double> v(12, 1.0);
  v[6] = 7;  // row 1, column 2
  const Array m = Array::from_vector<double>(v, {3, 4});
  EXPECT_EQ(f(m, Array::scalar<double>(-1.0)).item<double>(), 36.0);  // false branch: no check
  const std::string e = error_of<CheckError>([&] { f(m, Array::scalar<double>(1.0)); });
  EXPECT_NE(e.find("seven 7 (in scan iteration 2"), std::string::npos) << e;
}

TEST(LoopChecks, ChecksInTheBackwardLoopReportTheForwardRow) {
  // d/dx of sum(sqrt(x)) is 0.5 / sqrt(x): in the backward scan, row 5 divides by zero.
  auto f = jit([](const Tensor& xs) {
    return grad([](const Tensor& xs) {
      auto [c, ys] = scan([](const Tensor& c, const Tensor& x) { return std::pair{c + sqrt(x), x}; },
                          scalar(DType::f64, 0.0), xs);
      return c;
    })(xs);
  }, checks(CheckMode::all));
  std::vector<double> v(8, 4.0);
  EXPECT_EQ(f(Array::from_vector<double>(v, {8})).to_vector<double>(), std::vector<double>(8, 0.25));
  v[5] = 0.0;
  const std::string e = error_of<CheckError>([&] { f(Array::from_vector<double>(v, {8})); });
  EXPECT_NE(e.find("in scan iteration 5"), std::string::npos) << e;
}

}  // namespace
}  // namespace fjit
