// What one Adam update of a [784, 512] parameter costs (the large MLP's first layer), alone:
//   BM_AdamFjit/multi   jit(Adam::update) as compiled: one fused pass writing the parameter
//                       and both moments (multi-output fusion)
//   BM_AdamFjit/single  the same with Fusion::single (FJIT_FUSION=single): one pass per result
//   BM_AdamWFjit        AdamW with weight decay (torch's default 1e-2), the same ways: its
//                       own compiled program ("adamw"), one more operand and step than Adam's
//   BM_AdamEigenLoop    a hand-written pass: three Eigen array statements per block of 1024
//                       elements, compiled code with every value in registers (the floor an
//                       op-by-op fused program, fused_elementwise.cc, is compared with)
// cold:1 runs each update after writing 64 MiB elsewhere (untimed), as in a training step,
// where the rest of the step has pushed the parameters and moments out of cache.
//
//   build/bench/optimizer_bench --benchmark_enable_random_interleaving=true
//       --benchmark_repetitions=9 --benchmark_min_time=0.2 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "core/base/eigen.h"
#include <cstdlib>
#include <vector>

#include "core/lib/initializers.h"
#include "core/lib/optimizers.h"
#include "fjit.h"

using namespace fjit;

namespace {

constexpr int64_t kRows = 784, kCols = 512;

// With `cold`, evicts the caches (untimed) before each timed update.
void evict(benchmark::State& state, bool cold) {
  if (!cold) return;
  static std::vector<char> junk(64 << 20);
  state.PauseTiming();
  for (size_t i = 0; i < junk.size(); i += 64) junk[i]++;
  benchmark::ClobberMemory();
  state.ResumeTiming();
}

template <class Optimizer>
void optimizer_fjit(benchmark::State& state, const Optimizer& opt) {
  const bool multi = state.range(0) == 1, cold = state.range(1) == 1;
  JitOptions options;
  if (!multi) options.fusion = Fusion::single;
  ArrayDict p{{"w", he_uniform({kRows, kCols}, 1)}}, g{{"w", he_uniform({kRows, kCols}, 2)}};
  ArrayDict s = opt.init_state(p);
  auto step = jit([opt](const TensorDict& p, const TensorDict& g, const TensorDict& s) {
    auto [p2, s2] = opt.update(p, g, s);
    return std::tuple{p2, s2};
  }, options);
  auto out = step(p, g, s);
  for (auto _ : state) {
    evict(state, cold);
    step.run_into(out, p, g, s);
    benchmark::DoNotOptimize(std::get<0>(out).at("w").raw());
  }
  state.SetBytesProcessed(state.iterations() * kRows * kCols * 4 * 7);
}

void BM_AdamFjit(benchmark::State& state) { optimizer_fjit(state, Adam{}); }
BENCHMARK(BM_AdamFjit)->ArgNames({"multi", "cold"})->ArgsProduct({{1, 0}, {0, 1}})->Unit(benchmark::kMicrosecond);

void BM_AdamWFjit(benchmark::State& state) { optimizer_fjit(state, AdamW{}); }
BENCHMARK(BM_AdamWFjit)->ArgNames({"multi", "cold"})->ArgsProduct({{1, 0}, {0, 1}})->Unit(benchmark::kMicrosecond);

void BM_AdamEigenLoop(benchmark::State& state) {
  const int64_t n = kRows * kCols;
  std::vector<float> P(n, 0.1f), G(n, 0.2f), M(n, 0.01f), V(n, 0.02f), P2(n), M2(n), V2(n);
  const float b1 = 0.9f, b2 = 0.999f, step_size = 1e-2f, inv_sqrt_bc2 = 31.6f, eps = 1e-8f;
  using A = Eigen::Map<Eigen::ArrayXf>;
  for (auto _ : state) {
    evict(state, state.range(0) == 1);
    for (int64_t k = 0; k < n; k += 1024) {
      const int64_t len = std::min<int64_t>(1024, n - k);
      A m2(M2.data() + k, len), v2(V2.data() + k, len), p2(P2.data() + k, len);
      A m(M.data() + k, len), v(V.data() + k, len), g(G.data() + k, len), p(P.data() + k, len);
      m2 = m * b1 + g * (1 - b1);
      v2 = v * b2 + g.square() * (1 - b2);
      p2 = p - step_size * (m2 / (v2.sqrt() * inv_sqrt_bc2 + eps));
    }
    benchmark::DoNotOptimize(P2.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * 7);
}
BENCHMARK(BM_AdamEigenLoop)->ArgName("cold")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
