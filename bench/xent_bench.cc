// Issue 27: the cross entropy over a vocabulary, the fused op softmax_xent (core/nn/losses.h)
// against the composition it replaced (log_softmax, one_hot, multiply, sum), forward and
// backward: value_and_grad of the mean loss with respect to f32 logits [N, V]. Reports the
// time per step and the compiled step's arena (its intermediates after buffer reuse).
//   flock /work/build.lock build/bench/xent_bench
#include <benchmark/benchmark.h>

#include "fjit.h"

namespace fjit {
namespace {

Tensor composed_loss(const Tensor& logits, const Tensor& labels) {
  Tensor picked = sum(log_softmax(logits) * one_hot(labels, logits.dim(1), logits.dtype()), {-1});
  return mean(-picked);
}

Tensor fused_loss(const Tensor& logits, const Tensor& labels) {
  return mean(softmax_cross_entropy(logits, labels));
}

void BM_CrossEntropyStep(benchmark::State& state, bool fused) {
  const int64_t n = state.range(0), v = state.range(1);
  auto step = jit([fused](const Tensor& logits, const Tensor& labels) {
    return value_and_grad(fused ? fused_loss : composed_loss)(logits, labels);
  }, JitOptions{.name = fused ? "fused" : "composed", .checks = CheckMode::off});
  Array logits(DType::f32, {n, v});
  SplitMix64 rng(1);
  for (int64_t i = 0; i < logits.size(); ++i) logits.data<float>()[i] = static_cast<float>(8 * rng.uniform() - 4);
  Array labels(DType::i32, {n});
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform() * v);
  step(logits, labels);
  for (auto _ : state) benchmark::DoNotOptimize(step(logits, labels));
  const Executable& exe = *step.core().last_entry()->exe;
  state.counters["arena_MiB"] = static_cast<double>(exe.arena_bytes) / (1 << 20);
  state.counters["logits_MiB"] = static_cast<double>(logits.nbytes()) / (1 << 20);
}
BENCHMARK_CAPTURE(BM_CrossEntropyStep, composed, false)
    ->Args({2048, 256})->Args({2048, 32768})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_CrossEntropyStep, fused, true)
    ->Args({2048, 256})->Args({2048, 32768})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace fjit

BENCHMARK_MAIN();
