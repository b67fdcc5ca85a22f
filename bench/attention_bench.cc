// Fused attention (dot_product_attention) against the same attention composed of ordinary ops
// (matmul, scale, where-mask, softmax, matmul), one training step's worth: the loss
// sum(out * w) and its gradients with respect to q, k and v, causal, B = 1, H = 6, dh = 64,
// f32, on one intra-op thread. For each T it prints the time per step (the median of the
// timed steps after one warm-up) and the compiled plan's arena (its intermediate values after
// buffer reuse: where the composition holds its [H, T, T] scores and probabilities).
//
//   flock /work/build.lock build/bench/attention_bench [T ...]     (default: 256 1024 4096)
//
// Not a Google Benchmark binary: a step at T = 4096 composed takes seconds, so each size
// runs a fixed, small number of steps.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fjit.h"

using namespace fjit;

namespace {

Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t t = q.dim(2);
  Tensor s = matmul(q, k, false, true) * (1.0 / std::sqrt(static_cast<double>(q.dim(3))));
  Tensor mask = le(iota(DType::f32, {t, t}, 1), iota(DType::f32, {t, t}, 0));
  s = where(mask, s, full(DType::f32, {}, -INFINITY));
  Tensor e = exp(s - max(s, {3}, true));
  return matmul(e / sum(e, {3}, true), v);
}

Array random_array(Shape s, uint64_t seed) {
  Array a(DType::f32, std::move(s));
  SplitMix64 rng(seed);
  for (int64_t i = 0; i < a.size(); ++i) a.data<float>()[i] = static_cast<float>(2 * rng.uniform() - 1);
  return a;
}

struct Figures {
  double ms;
  double arena_mb;
};

Figures measure(bool fused, int64_t t, int steps) {
  const Array q = random_array({1, 6, t, 64}, 1), k = random_array({1, 6, t, 64}, 2),
              v = random_array({1, 6, t, 64}, 3), w = random_array({1, 6, t, 64}, 4);
  auto step = jit([fused](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w) {
    auto [loss, g] = value_and_grad([&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return sum((fused ? dot_product_attention(q, k, v, true) : composed(q, k, v)) * w);
    }, argnums<0, 1, 2>)(q, k, v);
    return std::tuple{loss, std::get<0>(g), std::get<1>(g), std::get<2>(g)};
  });
  step(q, k, v, w);  // compile and warm up
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step(q, k, v, w);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], static_cast<double>(step.core().last_entry()->exe->arena_bytes) / (1 << 20)};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {256, 1024, 4096};
  set_intra_op_threads(1);
  std::printf("causal attention fwd+bwd, B=1 H=6 dh=64 f32, 1 thread\n");
  std::printf("%6s  %12s %12s  %14s %14s\n", "T", "fused ms", "composed ms", "fused arena MB", "composed MB");
  for (int64_t t : sizes) {
    const int steps = t >= 4096 ? 3 : t >= 1024 ? 7 : 21;
    const Figures f = measure(true, t, steps);
    const Figures c = measure(false, t, steps);
    std::printf("%6lld  %12.2f %12.2f  %14.1f %14.1f\n", static_cast<long long>(t), f.ms, c.ms, f.arena_mb,
                c.arena_mb);
    std::fflush(stdout);
  }
  return 0;
}
