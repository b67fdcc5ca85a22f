// Core JIT overheads: cache-hit dispatch of a trivial function, trace + compile time of an
// MLP forward pass, and how many heap allocations Eigen's GEMM makes inside a cached step.
//
//   build/bench/core_bench
#include <benchmark/benchmark.h>

#include <atomic>

#include "fjit.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_memalign(size_t, size_t);
}
namespace {
std::atomic<long> g_allocs{0};
}
extern "C" {
void* malloc(size_t n) { g_allocs.fetch_add(1, std::memory_order_relaxed); return __libc_malloc(n); }
int posix_memalign(void** out, size_t a, size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  *out = __libc_memalign(a, n);
  return *out ? 0 : 12;
}
}

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
    const long before = g_allocs.load();
    f.run_into(out, p, x);
    allocs += g_allocs.load() - before;
    ++steps;
  }
  state.counters["allocs_per_step"] = static_cast<double>(allocs) / std::max<long>(steps, 1);
}
BENCHMARK(BM_MlpForwardAllocationsPerStep)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
