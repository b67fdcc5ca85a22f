// What vmap costs against the same computation written for the batch by hand, on an MLP
// loss (784 -> 256 -> 10, tanh, softmax cross entropy, a batch of 128):
//   BM_MlpLossHand          jit(mean(softmax_xent(mlp(x [B, 784]), y [B]))): written batched
//   BM_MlpLossVmap          jit(mean(vmap(example_loss)(p, x, y))): the loss of one example
//                           (x [784], y []) batched by vmap
//   BM_PerExampleGradVmap   jit(vmap(grad(example_loss))): every example's gradient
//   BM_PerExampleGradLoop   the same gradients from a host loop calling jit(grad(example_loss))
//                           on each example (what one must do without vmap)
//   BM_TraceCompileVmapGrad a fresh jit of vmap(grad(example_loss)) traced, compiled and run
//                           once on 2 examples
// Every call writes into the same result buffers (run_into), as a training loop does: the
// per-example gradients are B times the parameters (100 MiB here), and a fresh buffer each call
// would time the page faults of a new allocation.
//
//   build/bench/vmap_bench --benchmark_repetitions=5 --benchmark_min_time=0.2
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstring>

#include "core/lib/initializers.h"
#include "fjit.h"

using namespace fjit;

namespace {

constexpr int64_t kB = 128, kD = 784, kH = 256, kC = 10;

ArrayDict params() {
  ArrayDict p;
  p.set("w1", he_uniform({kD, kH}, 1));
  p.set("b1", Array::zeros(DType::f32, {kH}));
  p.set("w2", he_uniform({kH, kC}, 2));
  p.set("b2", Array::zeros(DType::f32, {kC}));
  return p;
}

Array inputs() { return he_uniform({kB, kD}, 3); }
Array labels() {
  std::vector<int32_t> y(kB);
  for (int64_t i = 0; i < kB; ++i) y[i] = static_cast<int32_t>(i % kC);
  return Array::from_vector(y, {kB});
}

Tensor logits_of(const TensorDict& p, const Tensor& x) {
  return matmul(tanh(matmul(x, p["w1"]) + p["b1"]), p["w2"]) + p["b2"];
}

Tensor example_loss(const TensorDict& p, const Tensor& x, const Tensor& y) {
  return sum(softmax_xent(logits_of(p, reshape(x, {1, -1})), reshape(y, {1})));
}

void BM_MlpLossHand(benchmark::State& state) {
  const ArrayDict p = params();
  const Array x = inputs(), y = labels();
  auto f = jit([](const TensorDict& q, const Tensor& xs, const Tensor& ys) {
    return mean(softmax_xent(logits_of(q, xs), ys));
  });
  Array out = f(p, x, y);
  for (auto _ : state) {
    f.run_into(out, p, x, y);
    benchmark::DoNotOptimize(out.raw());
  }
}
BENCHMARK(BM_MlpLossHand);

void BM_MlpLossVmap(benchmark::State& state) {
  const ArrayDict p = params();
  const Array x = inputs(), y = labels();
  auto f = jit([](const TensorDict& q, const Tensor& xs, const Tensor& ys) {
    return mean(vmap(example_loss, {kUnbatched, 0, 0})(q, xs, ys));
  });
  Array out = f(p, x, y);
  for (auto _ : state) {
    f.run_into(out, p, x, y);
    benchmark::DoNotOptimize(out.raw());
  }
}
BENCHMARK(BM_MlpLossVmap);

void BM_PerExampleGradVmap(benchmark::State& state) {
  const ArrayDict p = params();
  const Array x = inputs(), y = labels();
  auto f = jit([](const TensorDict& q, const Tensor& xs, const Tensor& ys) {
    return vmap(grad(example_loss), {kUnbatched, 0, 0})(q, xs, ys);
  });
  ArrayDict out = f(p, x, y);
  for (auto _ : state) {
    f.run_into(out, p, x, y);
    benchmark::DoNotOptimize(out.value(0).raw());
  }
}
BENCHMARK(BM_PerExampleGradVmap);

void BM_PerExampleGradLoop(benchmark::State& state) {
  const ArrayDict p = params();
  const Array x = inputs(), y = labels();
  auto g = jit([](const TensorDict& q, const Tensor& xi, const Tensor& yi) { return grad(example_loss)(q, xi, yi); });
  std::vector<Array> xs, ys;
  for (int64_t i = 0; i < kB; ++i) {
    Array xi(DType::f32, {kD});
    std::memcpy(xi.raw(), x.data<float>() + i * kD, static_cast<size_t>(kD) * 4);
    xs.push_back(xi);
    ys.push_back(Array::scalar(y.data<int32_t>()[i]));
  }
  std::vector<ArrayDict> outs;
  for (int64_t i = 0; i < kB; ++i) outs.push_back(g(p, xs[i], ys[i]));
  for (auto _ : state) {
    for (int64_t i = 0; i < kB; ++i) {
      g.run_into(outs[i], p, xs[i], ys[i]);
      benchmark::DoNotOptimize(outs[i].value(0).raw());
    }
  }
}
BENCHMARK(BM_PerExampleGradLoop);

// A fresh jit of vmap(grad(example_loss)) traced, compiled and run once on 2 examples: an
// upper bound of vmap(grad)'s trace and compile time.
void BM_TraceCompileVmapGrad(benchmark::State& state) {
  const ArrayDict p = params();
  Array x(DType::f32, {2, kD});
  std::memcpy(x.raw(), inputs().raw(), x.nbytes());
  const Array y = Array::from_vector<int32_t>({1, 2}, {2});
  for (auto _ : state) {
    auto f = jit([](const TensorDict& q, const Tensor& xs, const Tensor& ys) {
      return vmap(grad(example_loss), {kUnbatched, 0, 0})(q, xs, ys);
    });
    ArrayDict out = f(p, x, y);
    benchmark::DoNotOptimize(out.value(0).raw());
  }
}
BENCHMARK(BM_TraceCompileVmapGrad)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
