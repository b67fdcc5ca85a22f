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
//   BM_Op/<case>/{hand,vmap} the op sweep's larger cases on layer-sized operands: each op
//                           written for the batch by hand, and the same op on one example
//                           batched by vmap (run interleaved: --benchmark_enable_random_interleaving)
// Every call writes into the same result buffers (run_into), as a training loop does: the
// per-example gradients are B times the parameters (100 MiB here), and a fresh buffer each call
// would time the page faults of a new allocation.
//
// Kernels use FJIT_INTRA_OP_THREADS threads (one when unset, so that the host loop and the
// batched plan use the same number of cores and the CPU column, the main thread's, is the
// whole cost).
//
//   build/bench/vmap_bench --benchmark_repetitions=5 --benchmark_min_time=0.2
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <vector>

#include "core/lib/initializers.h"
#include "core/nn/activations.h"
#include "core/nn/conv.h"
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

// One op-sweep case: `hand` on the whole batch (x [B, ...], w) and `example` on one example
// (x [...], w), batched by vmap with in_axes {0, w_axis}.
struct OpCase {
  const char* name;
  Shape x, w;  // x with its batch axis; w with its batch axis when w_axis is 0
  int w_axis;
  std::function<Tensor(const Tensor&, const Tensor&)> hand, example;
};

std::vector<OpCase> op_cases() {
  const ConvOptions same{.padding = Padding::same()};
  return {
      {"tanh_mul_add[64,16384]", {64, 16384}, {64, 16384}, 0,
       [](const Tensor& x, const Tensor& y) { return tanh(x) * y + x; },
       [](const Tensor& x, const Tensor& y) { return tanh(x) * y + x; }},
      {"sum_rows[32,256,512]", {32, 256, 512}, {1}, kUnbatched,
       [](const Tensor& x, const Tensor&) { return sum(x, {2}); },
       [](const Tensor& x, const Tensor&) { return sum(x, {1}); }},
      {"sum_cols[32,256,512]", {32, 256, 512}, {1}, kUnbatched,
       [](const Tensor& x, const Tensor&) { return sum(x, {1}); },
       [](const Tensor& x, const Tensor&) { return sum(x, {0}); }},
      {"matmul_shared[32,128,512]x[512,512]", {32, 128, 512}, {512, 512}, kUnbatched,
       [](const Tensor& x, const Tensor& w) { return matmul(x, w); },
       [](const Tensor& x, const Tensor& w) { return matmul(x, w); }},
      {"matmul_batched[32,128,64]x[32,64,128]", {32, 128, 64}, {32, 64, 128}, 0,
       [](const Tensor& x, const Tensor& y) { return matmul(x, y); },
       [](const Tensor& x, const Tensor& y) { return matmul(x, y); }},
      {"conv3x3[32,28,28,32]x[3,3,32,64]", {32, 28, 28, 32}, {3, 3, 32, 64}, kUnbatched,
       [same](const Tensor& x, const Tensor& w) { return conv2d(x, w, same); },
       [same](const Tensor& x, const Tensor& w) {
         const Shape s = x.shape();
         return reshape(conv2d(reshape(x, {1, s[0], s[1], s[2]}), w, same), {s[0], s[1], -1});
       }},
      {"softmax[32,128,128]", {32, 128, 128}, {1}, kUnbatched,
       [](const Tensor& x, const Tensor&) { return softmax(x); },
       [](const Tensor& x, const Tensor&) { return softmax(x); }},
  };
}

void run_op_case(benchmark::State& state, const OpCase& c, bool batched_by_vmap) {
  const Array x = he_uniform(c.x, 11), w = he_uniform(c.w, 12);
  auto hand = c.hand;
  auto example = c.example;
  const std::vector<int> axes{0, c.w_axis};
  auto f = jit([=](const Tensor& xs, const Tensor& ws) {
    return batched_by_vmap ? vmap(example, axes)(xs, ws) : hand(xs, ws);
  });
  Array out = f(x, w);
  for (auto _ : state) {
    f.run_into(out, x, w);
    benchmark::DoNotOptimize(out.raw());
  }
}

}  // namespace

int main(int argc, char** argv) {
  set_intra_op_threads(config::is_set(config::Id::intra_op_threads)
                           ? static_cast<int>(config::intra_op_threads())
                           : 1);
  for (const OpCase& c : op_cases())
    for (bool v : {false, true})
      benchmark::RegisterBenchmark(fmt::format("BM_Op/{}/{}", c.name, v ? "vmap" : "hand").c_str(),
                                   [c, v](benchmark::State& s) { run_op_case(s, c, v); });
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
