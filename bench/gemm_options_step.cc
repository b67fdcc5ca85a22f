#include "bench/gemm_options_step.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/lib/initializers.h"
#include "examples/lib/mlp_model.h"
#include "parallel/fjit.h"

namespace fjit::bench {
namespace {

Tensor mlp_loss(const Params& p, const Tensor& x, const Tensor& y) {
  return mean(softmax_cross_entropy(examples::mlp_logits(p, x), y));
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

StepTiming time_large_mlp_step(int rounds, double ms, double (*peak_sample)()) {
  const std::vector<int64_t> sizes = {784, 512, 512, 10};
  constexpr int64_t kBatch = 128;
  auto step = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    return std::tuple{sgd(p, g, 0.01), loss};
  }, JitOptions{.name = "train_step", .donate_argnums = {0}});
  ArrayDict p = mlp_params(sizes, 1);
  Array x = he_uniform({kBatch, sizes.front()}, 3), y(DType::i32, {kBatch});
  for (int64_t i = 0; i < kBatch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 10);
  std::tuple<ArrayDict, Array> out{p, Array()};
  auto run = [&] { step.run_into(out, std::get<0>(out), x, y); };
  for (int i = 0; i < 5; ++i) run();
  StepTiming t;
  t.flops = static_cast<double>(step.core().last_entry()->exe->flops);
  std::vector<double> per_step, of_peak;
  for (int r = 0; r < rounds; ++r) {
    const double start = now_s();
    int n = 0;
    do {
      run();
      ++n;
    } while (now_s() - start < ms * 1e-3);
    per_step.push_back((now_s() - start) / n);
    if (peak_sample) of_peak.push_back(t.flops / per_step.back() * 1e-9 / peak_sample());
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  t.seconds = median(per_step);
  t.of_peak = of_peak.empty() ? 0.0 : median(of_peak);
  return t;
}

}  // namespace fjit::bench
