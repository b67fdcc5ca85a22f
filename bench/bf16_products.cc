// The bf16 products of the training steps, on each path of core/kernels/gemm/bf16_gemm.h side
// by side: the AMX tiles, AVX512_BF16's dot products and the widening fallback (f32 GEMM), each
// where this CPU has it, against the bf16 peaks measured on this core (bench/bf16_peak.h) and
// the f32 FMA peak (bench/gemm_options_peak.h).
//
//   taskset -c 0 build/bench/bf16_products [--rounds 5] [--ms 30]
//
// Per product (the MLP's, the CNN's conv2 as its patches GEMM, the language model's; jitted
// matmul ops on bf16 operands with f32 results, as the layers' bf16 policy runs them): each
// path's median time over rounds in which the paths take turns, its GFLOP/s and fraction of
// its own peak, the median and range over rounds of the AMX path's time divided by the
// AVX512_BF16 path's, and whether the AMX path's bits are the same with 1 and 2 threads.
// The path is chosen at run time per call (set_amx_allowed, set_isa_limit), so one plan serves
// all three. One thread except the bits check: pin the process to one core.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/bf16_peak.h"
#include "bench/gemm_options_peak.h"
#include "core/base/isa.h"
#include "parallel/fjit.h"

using namespace fjit;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Product {
  std::string what;
  bool ta, tb;
  int64_t m, k, n;
};

// Values in [-1, 1), each the upper half of an f32.
Array random_bf16(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Array out(DType::bf16, shape);
  auto* x = static_cast<uint16_t*>(out.raw());
  for (int64_t i = 0, n = shape[0] * shape[1]; i < n; ++i) {
    const float f = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    x[i] = static_cast<uint16_t>(bits >> 16);
  }
  return out;
}

struct Path {
  const char* name;
  bool available;
  double peak;                  // GFLOP/s of the instruction the path runs on
  std::function<void()> select;  // makes the bf16 products take this path
};

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  double ms = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ms")) ms = std::atof(argv[i + 1]);
  }
  apply_process_environment();
  set_intra_op_threads(1);
  std::printf("bf16_products: kernels' instruction set %s\n", isa_description());
  const bench::FmaPeak f32 = bench::measure_fma_peak();
  const bench::Bf16Peak bf = bench::measure_bf16_peak();
  std::printf("peaks on this core: AMX tiles %.0f GFLOP/s, AVX512_BF16 dot products %.0f, f32 FMA %.0f (%s)\n",
              bf.amx_gflops, bf.dpbf16_gflops, f32.f32_gflops, f32.isa.c_str());
  const bool amx_allowed = active_amx_bf16();
  std::vector<Path> paths = {
      {"amx", amx_allowed, bf.amx_gflops, [] { set_isa_limit(Isa::avx512); set_amx_allowed(true); }},
      {"avx512_bf16", cpu_has_avx512_bf16(), bf.dpbf16_gflops, [] { set_isa_limit(Isa::avx512); set_amx_allowed(false); }},
      {"widened", true, f32.f32_gflops, [] { set_isa_limit(Isa::avx2); set_amx_allowed(false); }},
  };
  // The training steps' products: M x K x N, op(A) transposed for the weight gradients and
  // op(B) transposed for the input gradients.
  const std::vector<Product> products = {
      {"MLP 784-512-512-10 b128 fc1 forward x@W", false, false, 128, 784, 512},
      {"MLP fc2 forward", false, false, 128, 512, 512},
      {"MLP fc1 weight gradient x^T@g", true, false, 784, 128, 512},
      {"MLP fc2 input gradient g@W^T", false, true, 128, 512, 512},
      {"CNN conv2 forward patches@W (14x14, 3x3x32 -> 64, b128)", false, false, 25088, 288, 64},
      {"CNN conv2 input gradient g@W^T", false, true, 25088, 64, 288},
      {"CNN conv2 weight gradient patches^T@g", true, false, 288, 25088, 64},
      {"LM qkv forward (2048 tokens, d384)", false, false, 2048, 384, 1152},
      {"LM MLP up forward", false, false, 2048, 384, 1536},
      {"LM MLP down forward", false, false, 2048, 1536, 384},
      {"LM MLP up weight gradient", true, false, 384, 2048, 1536},
      {"LM MLP down input gradient", false, true, 2048, 384, 1536},
  };
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  int status = 0;
  for (const Product& p : products) {
    const Array a = random_bf16(p.ta ? Shape{p.k, p.m} : Shape{p.m, p.k}, 1);
    const Array b = random_bf16(p.tb ? Shape{p.n, p.k} : Shape{p.k, p.n}, 2);
    const bool ta = p.ta, tb = p.tb;
    auto f = jit(Fn([ta, tb](const Tensor& x, const Tensor& y) { return matmul(x, y, DType::f32, ta, tb); }));
    Array out;
    const double flops = 2.0 * p.m * p.k * p.n;
    // The AMX path's bits with 1 and 2 threads.
    bool same_bits = true;
    if (amx_allowed) {
      paths[0].select();
      const Array one = f(a, b);
      set_intra_op_threads(2);
      const Array two = f(a, b);
      set_intra_op_threads(1);
      same_bits = one.bit_equal(two);
      if (!same_bits) status = 1;
    }
    std::vector<std::vector<double>> times(paths.size());
    std::vector<double> ratio;
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> round_time(paths.size(), 0);
      for (size_t i = 0; i < paths.size(); ++i) {
        const size_t at = (r % 2 == 0) ? i : paths.size() - 1 - i;  // alternate the order
        if (!paths[at].available) continue;
        paths[at].select();
        f.run_into(out, a, b);  // warm
        int reps = 0;
        const double t0 = now_s();
        double dt = 0;
        do {
          f.run_into(out, a, b);
          ++reps;
          dt = now_s() - t0;
        } while (dt < ms * 1e-3);
        round_time[at] = dt / reps;
        times[at].push_back(dt / reps);
      }
      if (paths[0].available && paths[1].available) ratio.push_back(round_time[0] / round_time[1]);
    }
    std::printf("RESULT bf16 product %s, %lldx%lldx%lld%s%s |", p.what.c_str(), static_cast<long long>(p.m),
                static_cast<long long>(p.k), static_cast<long long>(p.n), ta ? " ta" : "", tb ? " tb" : "");
    for (size_t i = 0; i < paths.size(); ++i) {
      if (!paths[i].available) continue;
      const double t = median(times[i]), g = flops / t * 1e-9;
      std::printf(" %s %.0f us %.0f GFLOP/s (%.0f%% of its peak);", paths[i].name, t * 1e6, g,
                  paths[i].peak > 0 ? 100 * g / paths[i].peak : 0.0);
    }
    if (!ratio.empty())
      std::printf(" amx/avx512_bf16 time %.2fx (%.2f-%.2f);", median(ratio),
                  *std::min_element(ratio.begin(), ratio.end()), *std::max_element(ratio.begin(), ratio.end()));
    std::printf(" amx bits 1 = 2 threads: %s\n", amx_allowed ? (same_bits ? "yes" : "NO") : "n/a");
  }
  return status;
}
