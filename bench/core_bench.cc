// Core JIT overheads: cache-hit dispatch of a trivial function, trace + compile time of an
// MLP forward pass, how many heap allocations Eigen's GEMM makes inside a cached step, and
// the arena of compiled MLP training steps against their minimal live set.
//
//   build/bench/core_bench
#include <benchmark/benchmark.h>

#include "fjit.h"
#include "examples/lib/mlp_model.h"
#include "tests/alloc_counter.h"

using namespace fjit;

namespace {

void BM_DispatchCacheHit(benchmark::State& state) {
  auto f = jit([](const Tensor& x) { return x + 1.0; });
  Array x = Array::full(DType::f32, {4}, 1.0), out;
  f.run_into(out, x);
  for (auto _ : state) {
    f.run_into(out, x);
    benchmark::DoNotOptimize(out.raw());
  }
}
BENCHMARK(BM_DispatchCacheHit);

void BM_DispatchCacheHitReturningNewArray(benchmark::State& state) {
  auto f = jit([](const Tensor& x) { return x + 1.0; });
  Array x = Array::full(DType::f32, {4}, 1.0);
  f(x);
  for (auto _ : state) benchmark::DoNotOptimize(f(x).raw());
}
BENCHMARK(BM_DispatchCacheHitReturningNewArray);

Tensor mlp_forward(const Params& p, const Tensor& x) {
  Tensor h1 = relu(matmul(x, p["w1"]) + p["b1"]);
  Tensor h2 = relu(matmul(h1, p["w2"]) + p["b2"]);
  return matmul(h2, p["w3"]) + p["b3"];
}

ArrayDict mlp_params(int64_t in, int64_t hidden, int64_t out) {
  return ArrayDict{{"w1", Array::full(DType::f32, {in, hidden}, 0.01)}, {"b1", Array(DType::f32, {hidden})},
                   {"w2", Array::full(DType::f32, {hidden, hidden}, 0.01)}, {"b2", Array(DType::f32, {hidden})},
                   {"w3", Array::full(DType::f32, {hidden, out}, 0.01)}, {"b3", Array(DType::f32, {out})}};
}

void BM_TraceAndCompileMlpForward(benchmark::State& state) {
  ArrayDict p = mlp_params(784, 512, 10);
  Array x = Array(DType::f32, {128, 784});
  for (auto _ : state) {
    auto f = jit(mlp_forward);  // a fresh cache each iteration: always a miss
    Array out;
    f.run_into(out, p, x);
    benchmark::DoNotOptimize(out.raw());
  }
}
BENCHMARK(BM_TraceAndCompileMlpForward)->Unit(benchmark::kMillisecond);

// Heap allocations per cached step of the MLP forward; all of them come from Eigen's GEMM
// packing buffers (fjit's own part allocates nothing: tests/no_alloc_test.cc).
void BM_MlpForwardAllocationsPerStep(benchmark::State& state) {
  ArrayDict p = mlp_params(784, 512, 10);
  Array x = Array::full(DType::f32, {128, 784}, 0.1), out;
  auto f = jit(mlp_forward);
  f.run_into(out, p, x);
  f.run_into(out, p, x);
  long allocs = 0, steps = 0;
  for (auto _ : state) {
    const long before = fjit::testing::allocations();
    f.run_into(out, p, x);
    allocs += fjit::testing::allocations() - before;
    ++steps;
  }
  state.counters["allocs_per_step"] = static_cast<double>(allocs) / std::max<long>(steps, 1);
}
BENCHMARK(BM_MlpForwardAllocationsPerStep)->Unit(benchmark::kMillisecond);

// Arena bytes of compiled training steps (value_and_grad + SGD) against their minimal live
// set (the peak of simultaneously live intermediates): deterministic, reported as counters.
Tensor mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  return mean(softmax_cross_entropy(examples::mlp_logits(p, x), y));
}
void BM_TrainStepArena(benchmark::State& state, std::vector<int64_t> sizes, int64_t batch) {
  auto step = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    return std::tuple{sgd(p, g, 0.01), loss};
  }, JitOptions{.name = "train_step", .checks = CheckMode::off});
  ArrayDict p = fjit::mlp_params(sizes, 1);
  Array x = Array::full(DType::f32, {batch, sizes.front()}, 0.5);
  Array y = Array::full(DType::i32, {batch}, 1);
  step(p, x, y);
  for (auto _ : state) benchmark::DoNotOptimize(step.core().last_entry());
  const Executable& exe = *step.core().last_entry()->exe;
  state.counters["arena_bytes"] = static_cast<double>(exe.arena_bytes);
  state.counters["min_live_bytes"] = static_cast<double>(exe.min_live_bytes);
  state.counters["arena_over_min_live"] =
      static_cast<double>(exe.arena_bytes) / static_cast<double>(std::max<size_t>(exe.min_live_bytes, 1));
}
BENCHMARK_CAPTURE(BM_TrainStepArena, mlp_784_512_512_10_b128, std::vector<int64_t>{784, 512, 512, 10}, 128)
    ->Iterations(1);
BENCHMARK_CAPTURE(BM_TrainStepArena, mlp_64_128_10_b64, std::vector<int64_t>{64, 128, 10}, 64)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
