// fjit performs no heap allocation when a cached step runs: every malloc in this process is
// counted (the hook forwards to glibc) and a warm run_into() must add none.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "fjit.h"
#include "tests/alloc_counter.h"

namespace fjit {
namespace {

TEST(NoAlloc, CountingHookSeesAllocations) {
  const long before = testing::allocations();
  void* (*volatile alloc)(size_t) = std::malloc;  // volatile: the call cannot be elided
  void* p = alloc(1000);
  std::free(p);
  EXPECT_EQ(testing::allocations() - before, 1);
}

// The per-thread counter (tests/checks_replica_test.cc's replicas) counts the calling thread's
// allocations and no other thread's.
TEST(NoAlloc, ThreadCounterCountsTheCallingThreadOnly) {
  void* (*volatile alloc)(size_t) = std::malloc;
  std::atomic<int> stage{0};
  long other_before = 0, other_after = 0;
  std::thread other([&] {
    other_before = testing::thread_allocations();
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    other_after = testing::thread_allocations();
  });
  while (stage.load() != 1) std::this_thread::yield();
  const long before = testing::thread_allocations();
  std::free(alloc(1000));
  std::free(alloc(1000));
  EXPECT_EQ(testing::thread_allocations() - before, 2);
  stage = 2;
  other.join();
  EXPECT_EQ(other_after, other_before);
}

TEST(NoAlloc, CachedStepAllocatesNothing) {
  auto step = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    Tensor h = relu(matmul(x, p["w1"]) + p["b1"]);
    Tensor logits = matmul(h, p["w2"]) + p["b2"];
    Tensor loss = mean(softmax_cross_entropy(logits, y));
    TensorDict next;
    next.set("w1", p["w1"] * 0.99);
    next.set("b1", p["b1"]);
    next.set("w2", p["w2"] * 0.99);
    next.set("b2", p["b2"]);
    return std::tuple{next, loss};
  });
  ArrayDict p{{"w1", Array::full(DType::f32, {16, 32}, 0.01)}, {"b1", Array::full(DType::f32, {32}, 0.0)},
              {"w2", Array::full(DType::f32, {32, 10}, 0.02)}, {"b2", Array::full(DType::f32, {10}, 0.0)}};
  Array x = Array::full(DType::f32, {8, 16}, 0.5);
  Array y = Array::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  std::tuple<ArrayDict, Array> out;
  step.run_into(out, p, x, y);  // compiles
  step.run_into(out, p, x, y);  // warms thread-local scratch
  const long before = testing::allocations();
  for (int i = 0; i < 100; ++i) step.run_into(out, p, x, y);
  EXPECT_EQ(testing::allocations() - before, 0);
  EXPECT_EQ(step.core().trace_count(), 1);
  EXPECT_NEAR(std::get<1>(out).item<float>(), std::log(10.0f), 1e-3);
}

// A training step whose plan holds every fused instruction kind: elementwise groups, a fused
// sum (the global norm), SGD as GEMM epilogues, and narrow (10-column) products.
TEST(NoAlloc, CachedFusedTrainingStepAllocatesNothing) {
  auto step = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto loss_fn = [](const Params& q, const Tensor& xs, const Tensor& ys) {
      Tensor h = relu(matmul(xs, q["w1"]) + q["b1"]);
      return mean(softmax_cross_entropy(matmul(h, q["w2"]) + q["b2"], ys));
    };
    auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
    TensorDict biases;  // the weights' gradients stay single-use: their SGD is a GEMM epilogue
    biases.set("b1", g["b1"]);
    biases.set("b2", g["b2"]);
    return std::tuple{sgd(p, g, 0.1), loss, global_norm(biases)};
  });
  ArrayDict p{{"w1", Array::full(DType::f32, {16, 32}, 0.01)}, {"b1", Array::full(DType::f32, {32}, 0.0)},
              {"w2", Array::full(DType::f32, {32, 10}, 0.02)}, {"b2", Array::full(DType::f32, {10}, 0.0)}};
  Array x = Array::full(DType::f32, {64, 16}, 0.5);
  Array y(DType::i32, {64});
  for (int i = 0; i < 64; ++i) y.data<int32_t>()[i] = i % 10;
  std::tuple<ArrayDict, Array, Array> out;
  step.run_into(out, p, x, y);
  step.run_into(out, p, x, y);
  const std::string plan = step.core().last_entry()->exe->plan_string();
  for (const char* kind : {"fused[", "fused_sum[", "gemm["}) EXPECT_NE(plan.find(kind), std::string::npos) << plan;
  const long before = testing::allocations();
  for (int i = 0; i < 100; ++i) step.run_into(out, p, x, y);
  EXPECT_EQ(testing::allocations() - before, 0) << plan;
  EXPECT_TRUE(std::isfinite(std::get<2>(out).item<float>()));
}

}  // namespace
}  // namespace fjit
