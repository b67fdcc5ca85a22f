// vmap of cond with a shared predicate and of while_loop (core/autodiff/batching_control.cc)
// against a host loop calling the unbatched function, jitted, on each example: bit for bit
// (the batched graphs run the example's elementwise kernels), and the batched plan holds one
// control op, not one per example.
#include <gtest/gtest.h>

#include <string>

#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::random_f32;
using testing::row;
using testing::stack_rows;

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

template <class J>
std::string plan_of(J& j) {
  return j.core().last_entry()->exe->plan_string();
}

Tensor shared_cond(const Tensor& x, const Tensor& flag) {  // x [3] batched, flag [] shared
  return cond(flag > 0.0, [](const Tensor& v) { return tanh(v) * 2.0 + 1.0; }, [](const Tensor& v) { return -v; }, x);
}

TEST(VmapControl, ACondWithASharedPredicateStaysOneCondOfBatchedBranches) {
  const Array xs = random_f32({4, 3}, 1);
  auto one = jit(shared_cond);
  auto batched = jit([](const Tensor& x, const Tensor& f) { return vmap(shared_cond, {0, kUnbatched})(x, f); });
  for (float flag : {1.f, -1.f}) {
    const Array f = Array::scalar(flag);
    std::vector<Array> rows;
    for (int64_t i = 0; i < 4; ++i) rows.push_back(one(row(xs, i), f));
    const Array got = batched(xs, f);
    EXPECT_TRUE(got.bit_equal(stack_rows(rows))) << "flag " << flag;
    EXPECT_EQ(count_of(plan_of(batched), "= cond"), 1) << plan_of(batched);
  }
}

Tensor shared_cond_loss(const Tensor& w, const Tensor& x, const Tensor& flag) {
  return sum(shared_cond(w * x, flag));
}

// Per-example gradients through a cond on a shared flag: its VJP, a cond on the same flag,
// is batched the same way.
TEST(VmapControl, PerExampleGradientsThroughACondWithASharedPredicate) {
  const Array w = random_f32({3}, 2), xs = random_f32({5, 3}, 3), f = Array::scalar(1.f);
  auto one = jit([](const Tensor& w, const Tensor& x, const Tensor& f) { return grad(shared_cond_loss)(w, x, f); });
  auto batched = jit([](const Tensor& w, const Tensor& x, const Tensor& f) {
    return vmap(grad(shared_cond_loss), {kUnbatched, 0, kUnbatched})(w, x, f);
  });
  std::vector<Array> rows;
  for (int64_t i = 0; i < 5; ++i) rows.push_back(one(w, row(xs, i), f));
  EXPECT_TRUE(batched(w, xs, f).bit_equal(stack_rows(rows)));
  // The forward and backward conds (the compiler may merge the two), not one per example.
  const int conds = count_of(plan_of(batched), "= cond");
  EXPECT_TRUE(conds == 1 || conds == 2) << plan_of(batched);
}

// A counter shared by the batch decides the trips: one while_loop of the batched body.
Tensor shared_while(const Tensor& x, const Tensor& n) {  // x [2] batched, n [] shared
  auto [i, y] = while_loop([&](const std::pair<Tensor, Tensor>& s) { return s.first < n; },
                           [](const std::pair<Tensor, Tensor>& s) {
                             return std::pair{s.first + 1.0, tanh(s.second) * 0.5 + s.second};
                           },
                           std::pair{scalar(DType::f32, 0.0), x});
  return y + i;
}

TEST(VmapControl, AWhileLoopWithASharedPredicateIsOneLoopOfTheBatchedBody) {
  const Array xs = random_f32({4, 2}, 4), n = Array::scalar(3.f);
  auto one = jit(shared_while);
  auto batched = jit([](const Tensor& x, const Tensor& n) { return vmap(shared_while, {0, kUnbatched})(x, n); });
  std::vector<Array> rows;
  for (int64_t i = 0; i < 4; ++i) rows.push_back(one(row(xs, i), n));
  EXPECT_TRUE(batched(xs, n).bit_equal(stack_rows(rows)));
  EXPECT_EQ(count_of(plan_of(batched), "= while_loop"), 1) << plan_of(batched);
}

// Each example stops at its own trip: x halves (even) or goes to 3x + 1 (odd) until it is 1;
// the carry counts the steps. A loop over the batch is the oracle.
std::pair<Tensor, Tensor> collatz(const Tensor& x) {  // x [] f32, a positive integer
  return while_loop([](const std::pair<Tensor, Tensor>& s) { return s.first > 1.0; },
                    [](const std::pair<Tensor, Tensor>& s) {
                      const Tensor half = s.first * 0.5;
                      const Tensor even = eq(cast(cast(half, DType::i32), DType::f32), half);
                      return std::pair{where(even, half, s.first * 3.0 + 1.0), s.second + 1.0};
                    },
                    std::pair{x, scalar(DType::f32, 0.0)});
}

TEST(VmapControl, AWhileLoopWithABatchedPredicateKeepsEachFinishedExamplesCarry) {
  const Array xs = Array::from_vector<float>({1, 6, 27, 2, 7}, {5});
  auto one = jit([](const Tensor& x) {
    auto [e, s] = collatz(x);
    return std::tuple{e, s};
  });
  auto batched = jit([](const Tensor& x) {
    auto [e, s] = vmap(collatz)(x);
    return std::tuple{e, s};
  });
  std::vector<Array> ends, steps;
  for (int64_t i = 0; i < 5; ++i) {
    auto [e, s] = one(row(xs, i));
    ends.push_back(e);
    steps.push_back(s);
  }
  auto [e, s] = batched(xs);
  EXPECT_TRUE(e.bit_equal(stack_rows(ends)));
  EXPECT_TRUE(s.bit_equal(stack_rows(steps)));
  EXPECT_EQ(s.template data<float>()[2], 111.f);  // 27 takes 111 steps to reach 1
  EXPECT_EQ(s.template data<float>()[0], 0.f);
  EXPECT_EQ(count_of(plan_of(batched), "= while_loop"), 1) << plan_of(batched);
}

// A check in the body: an example that has finished does not run its body again (its check
// passes), and a failing one is named by its batch element.
TEST(VmapControl, AChecksInABatchedWhileLoopReportOnlyTheExamplesStillRunning) {
  JitOptions o;
  o.checks = CheckMode::user;
  o.policy = CheckPolicy::throw_error;
  auto count_down = [](const Tensor& x) {
    return while_loop([](const Tensor& v) { return v > 0.0; },
                      [](const Tensor& v) {
                        const Tensor next = v - 1.0;
                        check(next > -0.25, "went below zero: {}", next);
                        return next;
                      },
                      x);
  };
  auto f = jit([&](const Tensor& x) { return vmap(count_down)(x); }, o);
  // 0 finishes at once and 1 after one trip: continuing them would fail the check.
  const Array ok = f(Array::from_vector<float>({0, 1, 4}, {3}));
  EXPECT_TRUE(ok.bit_equal(Array::from_vector<float>({0, 0, 0}, {3})));
  const std::string what = testing::error_of<CheckError>(
      [&] { f(Array::from_vector<float>({0, 3, 2.5f, 4}, {4})); });
  EXPECT_NE(what.find("went below zero: -0.5 (vmap batch element 2)"), std::string::npos) << what;
}

}  // namespace
}  // namespace fjit
