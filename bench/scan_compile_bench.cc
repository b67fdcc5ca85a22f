// Trace + compile time of a loop against its trip count: an RNN cell over T steps written
// with scan (the body traced once, a loop in the plan) and the same loop unrolled by a C++
// for (T copies of the cell in the graph). The scan's time stays flat as T grows; the
// unrolled one grows with T. Each iteration builds a fresh jit and runs its first call
// (trace, compile, one run), as a user's first step does; the counter trace_compile_ms is
// the trace + compile part alone (the run of a longer loop takes longer either way).
//
//   build/bench/scan_compile_bench
#include <benchmark/benchmark.h>

#include "parallel/fjit.h"

using namespace fjit;

namespace {

Tensor cell(const Tensor& w, const Tensor& h, const Tensor& x) { return tanh(matmul(h, w) + x); }

Array filled(Shape s) { return Array::full(DType::f32, std::move(s), 0.01); }

// Reports the mean trace + compile time of the jits built since `before` (the metrics
// report's CompileTime), apart from the run the benchmark's own time includes.
struct CompileClock {
  int64_t ns = metrics().compile_time.total_ns(), count = metrics().compile_time.count();
  void report(benchmark::State& state) const {
    const int64_t n = metrics().compile_time.count() - count;
    state.counters["trace_compile_ms"] = n ? (metrics().compile_time.total_ns() - ns) * 1e-6 / n : 0;
  }
};

void BM_ScanFirstCall(benchmark::State& state) {
  const int64_t t = state.range(0);
  const Array w = filled({32, 32}), h0 = filled({8, 32}), xs = filled({t, 8, 32});
  const CompileClock clock;
  for (auto _ : state) {
    auto f = jit([](const Tensor& w, const Tensor& h0, const Tensor& xs) {
      auto [h, ys] = scan([&](const Tensor& h, const Tensor& x) {
        Tensor n = cell(w, h, x);
        return std::pair{n, sum(n)};
      }, h0, xs);
      return std::tuple{h, sum(ys)};
    });
    benchmark::DoNotOptimize(f(w, h0, xs));
  }
  clock.report(state);
}

void BM_UnrolledFirstCall(benchmark::State& state) {
  const int64_t t = state.range(0);
  const Array w = filled({32, 32}), h0 = filled({8, 32}), xs = filled({t, 8, 32});
  const CompileClock clock;
  for (auto _ : state) {
    auto f = jit([t](const Tensor& w, const Tensor& h0, const Tensor& xs) {
      Tensor h = h0, total = scalar(DType::f32, 0.0);
      for (int64_t i = 0; i < t; ++i) {
        h = cell(w, h, reshape(slice(xs, {i, 0, 0}, {i + 1, 8, 32}), {8, 32}));
        total = total + sum(h);
      }
      return std::tuple{h, total};
    });
    benchmark::DoNotOptimize(f(w, h0, xs));
  }
  clock.report(state);
}

BENCHMARK(BM_ScanFirstCall)->Arg(4)->Arg(64)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_UnrolledFirstCall)->Arg(4)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
