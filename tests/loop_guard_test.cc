// A step that never ends (core/compile/loop_guard.h): a while_loop whose condition never turns
// false stops at its trip limit or at the step's deadline and raises a check reported like any
// other, alone and on thread replicas where only one replica loops; a loop that ends by itself
// is untouched. The oracle for the results is a plain host loop.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

JitOptions guarded(CheckPolicy policy, int64_t max_trips = 0, double timeout_s = 0) {
  JitOptions o;
  o.name = "looping_step";
  o.checks = CheckMode::user;
  o.policy = policy;
  o.while_max_trips = max_trips;
  o.step_timeout_s = timeout_s;
  return o;
}

// Adds `rate` to the carry while it is below `limit`: with rate 0 the loop never ends. Also
// returns the number of iterations run. kLoopLine is the while_loop's line.
constexpr int kLoopLine = __LINE__ + 3;
std::tuple<Tensor, Tensor> count_up(const Tensor& x0, const Tensor& rate, const Tensor& limit, WhileOptions w = {}) {
  std::pair<Tensor, Tensor> init{x0, scalar(DType::i32, 0)};
  auto [x, n] = while_loop([&](const std::pair<Tensor, Tensor>& c) { return all(c.first < limit); },
                           [&](const std::pair<Tensor, Tensor>& c) {
                             return std::pair{c.first + rate, c.second + scalar(DType::i32, 1)};
                           },
                           init, w);
  return {x, n};
}

Array vec(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Array::from_vector(std::move(v), {n});
}
Array f32(float v) { return Array::from_vector(std::vector<float>{v}, {}); }

TEST(LoopGuard, TripLimitStopsALoopThatNeverEndsAndNamesItsCallSiteAndIteration) {
  auto f = jit([](const Tensor& x0, const Tensor& rate, const Tensor& limit) {
    return count_up(x0, rate, limit, WhileOptions{.max_trips = 50});
  }, guarded(CheckPolicy::throw_error));
  const std::string what = error_of<CheckError>([&] { f(vec({1, 2}), f32(0), f32(10)); });
  EXPECT_TRUE(has(what, "while_loop stopped at its trip limit of 50 iterations")) << what;
  EXPECT_TRUE(has(what, "carry then held 0 non-finite values")) << what;
  EXPECT_TRUE(has(what, "(in while_loop iteration 50, the while_loop at ")) << what;
  EXPECT_TRUE(has(what, "loop_guard_test.cc:" + std::to_string(kLoopLine) + ")")) << what;
  EXPECT_TRUE(has(what, "at step 0:")) << what;
}

// Under all checks the automatic-checks pass renumbers every site: the guard's moves with them,
// beside the automatic checks of the body and a user check before and after the loop.
TEST(LoopGuard, TheGuardKeepsItsSiteUnderAllChecks) {
  JitOptions o = guarded(CheckPolicy::log);
  o.checks = CheckMode::all;
  auto f = jit([](const Tensor& x0, const Tensor& rate, const Tensor& limit) {
    check(all(x0 > -100.0), "x0 too small");
    auto [x, n] = count_up(log(x0 + 1.0), rate, limit, WhileOptions{.max_trips = 30});
    check(n < scalar(DType::i32, 1000), "n is {}", n);
    return x;
  }, o);
  testing::LogCapture logs;
  Array x = f(vec({0, 1}), f32(0), f32(10));
  EXPECT_TRUE(logs.contains("while_loop stopped at its trip limit of 30 iterations")) << logs.text();
  EXPECT_FALSE(logs.contains("x0 too small")) << logs.text();
  EXPECT_FALSE(logs.contains("n is")) << logs.text();
  EXPECT_EQ(x.data<float>()[0], 0.0f);
  EXPECT_EQ(x.data<float>()[1], std::log(2.0f));
}

TEST(LoopGuard, ALoopThatEndsByItselfIsUntouchedEvenAtExactlyItsLimit) {
  auto f = jit([](const Tensor& x0, const Tensor& rate, const Tensor& limit) {
    return count_up(x0, rate, limit, WhileOptions{.max_trips = 10});
  }, guarded(CheckPolicy::throw_error));
  for (float limit : {0.5f, 3.5f, 9.5f}) {  // 0, 3 and 10 iterations: the last one is the limit
    auto [x, n] = f(vec({0, -1}), f32(1), f32(limit));
    int iterations = 0;
    std::vector<float> host{0, -1};
    while (host[0] < limit && host[1] < limit) {
      for (float& v : host) v += 1;
      ++iterations;
    }
    EXPECT_EQ(n.item<int32_t>(), iterations) << limit;
    EXPECT_EQ(x.data<float>()[0], host[0]) << limit;
    EXPECT_EQ(x.data<float>()[1], host[1]) << limit;
  }
}

TEST(LoopGuard, TheJitsDefaultLimitAppliesToLoopsThatSetNone) {
  auto f = jit([](const Tensor& x0, const Tensor& rate, const Tensor& limit) {
    return count_up(x0, rate, limit);
  }, guarded(CheckPolicy::throw_error, /*max_trips=*/7));
  const std::string what = error_of<CheckError>([&] { f(vec({1}), f32(0), f32(2)); });
  EXPECT_TRUE(has(what, "trip limit of 7 iterations")) << what;
  // A loop's own limit wins over the default; 0 means none.
  auto g = jit([](const Tensor& x0, const Tensor& rate, const Tensor& limit) {
    return count_up(x0, rate, limit, WhileOptions{.max_trips = 0});
  }, guarded(CheckPolicy::throw_error, /*max_trips=*/7));
  auto [x, n] = g(vec({0}), f32(1), f32(20));
  EXPECT_EQ(n.item<int32_t>(), 20);
}

TEST(LoopGuard, TheReportCountsNonFiniteValuesInTheCarry) {
  auto f = jit([](const Tensor& x0, const Tensor& rate) {
    std::pair<Tensor, Tensor> init{x0, rate};
    auto [x, r] = while_loop([](const std::pair<Tensor, Tensor>& c) { return logical_not(all(c.first > 1e30)); },
                             [](const std::pair<Tensor, Tensor>& c) { return std::pair{c.first * c.second, c.second}; },
                             init, WhileOptions{.max_trips = 4});
    return x;
  }, guarded(CheckPolicy::throw_error));
  // NaN never compares above 1e30, so the loop would go on; after 4 trips x is {NaN, NaN, 16}.
  const std::string what = error_of<CheckError>([&] { f(vec({kNaN, kNaN, 1}), f32(2)); });
  EXPECT_TRUE(has(what, "carry then held 2 non-finite values")) << what;
}

TEST(LoopGuard, WithChecksOffThereIsNoGuard) {
  JitOptions o = guarded(CheckPolicy::throw_error);
  o.checks = CheckMode::off;
  auto f = jit([](const Tensor& x0, const Tensor& rate, const Tensor& limit) {
    return count_up(x0, rate, limit, WhileOptions{.max_trips = 3});
  }, o);
  auto [x, n] = f(vec({0}), f32(1), f32(12));
  EXPECT_EQ(n.item<int32_t>(), 12);
}

TEST(LoopGuard, AStepDeadlineStopsALoopThatNeverEndsAndSkipStepKeepsTheState) {
  // No trip limit: only the deadline ends the loop.
  auto f = jit([](const Params& p, const Tensor& rate, const Tensor& limit) {
    auto [x, n] = count_up(p["x"], rate, limit);
    TensorDict next;
    next.set("x", x);
    next.set("n", n);
    return next;
  }, guarded(CheckPolicy::skip_step, 0, /*timeout_s=*/0.05));
  ArrayDict state{{"x", vec({0.25f, 1.5f})}, {"n", Array::from_vector(std::vector<int32_t>{9}, {})}};
  ArrayDict out;
  StepResult r = f.run_into(out, state, f32(1), f32(5));  // ends by itself: x[1] 1.5 -> 5.5
  EXPECT_FALSE(r.skipped);
  EXPECT_EQ(out["n"].item<int32_t>(), 4);
  const ArrayDict before = testing::deep_copy(state);
  ArrayDict next;
  r = f.run_into(next, state, f32(0), f32(5));  // never ends
  EXPECT_TRUE(r.skipped);
  EXPECT_TRUE(r.raised(CheckKind::step_timeout));
  EXPECT_FALSE(r.raised(CheckKind::loop_trip_limit));
  testing::expect_bit_equal(next, before, "state after a timed-out step");
  // Under throw the report says which limit passed.
  auto g = jit([](const Tensor& x0, const Tensor& rate, const Tensor& limit) {
    return count_up(x0, rate, limit);
  }, guarded(CheckPolicy::throw_error, 0, 0.05));
  const std::string what = error_of<CheckError>([&] { g(vec({1}), f32(0), f32(2)); });
  EXPECT_TRUE(has(what, "the step ran past its deadline of 0.05 s")) << what;
  EXPECT_TRUE(has(what, "loop_guard_test.cc:" + std::to_string(kLoopLine))) << what;
}

// Thread replicas: replica 1's shard has rate 0, so only its loop never ends, and the others
// wait for it in the pmean after the loop. Each replica is released once replica 1's loop
// stops, and every replica throws the same report at the same step.
void replicas_all_report(int replicas, int64_t max_trips, double timeout_s, const std::string& expected) {
  Mesh mesh = Mesh::threads(replicas);
  PmapOptions o;
  o.jit = guarded(CheckPolicy::throw_error, max_trips, timeout_s);
  o.jit.num_replicas = replicas;
  auto step = pmap(mesh, "batch", [](const Tensor& rate) {
    auto [x, n] = count_up(full(DType::f32, {1}, 0.0), sum(rate), scalar(DType::f32, 4.0));
    return pmean(x, "batch");
  }, o);
  Array good = Array::full(DType::f32, {replicas, 1}, 1.0);
  EXPECT_EQ(step(good).data<float>()[0], 4.0f);
  Array bad = good.clone();
  bad.data<float>()[1] = 0;  // replica 1's rate
  const std::string what = error_of<CheckError>([&] { step(bad); });
  EXPECT_TRUE(has(what, expected)) << what;
  EXPECT_TRUE(has(what, "at step 1:")) << what;
  EXPECT_TRUE(has(what, "raised on replica 1 of " + std::to_string(replicas))) << what;
  EXPECT_EQ(step(good).data<float>()[0], 4.0f);  // the mesh goes on
}

TEST(LoopGuard, OnThreadReplicasTheTripLimitReleasesEveryReplica) {
  for (int replicas : {2, 3}) replicas_all_report(replicas, 100, 0, "trip limit of 100 iterations");
}

TEST(LoopGuard, OnThreadReplicasTheDeadlineReleasesEveryReplica) {
  for (int replicas : {2, 3}) replicas_all_report(replicas, 0, 0.05, "ran past its deadline");
}

TEST(LoopGuard, MalformedEnvironmentValuesAreNamed) {
  // FJIT_WHILE_MAX_TRIPS is read strictly when a jit is made.
  ::setenv("FJIT_WHILE_MAX_TRIPS", "lots", 1);
  const std::string what = error_of<std::invalid_argument>([] { (void)JitOptions{}.resolved(); });
  ::unsetenv("FJIT_WHILE_MAX_TRIPS");
  EXPECT_TRUE(has(what, "FJIT_WHILE_MAX_TRIPS")) << what;
  ::setenv("FJIT_WHILE_MAX_TRIPS", "12", 1);
  ::setenv("FJIT_STEP_TIMEOUT", "2.5", 1);
  const JitOptions o = JitOptions{}.resolved();
  ::unsetenv("FJIT_WHILE_MAX_TRIPS");
  ::unsetenv("FJIT_STEP_TIMEOUT");
  EXPECT_EQ(o.while_max_trips, 12);
  EXPECT_EQ(o.step_timeout_s, 2.5);
}

}  // namespace
}  // namespace fjit
