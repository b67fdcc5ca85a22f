// The FMA-peak loops of gemm_options_peak.h. This file is compiled with -mavx2 -mfma
// (bench/CMakeLists.txt); the AVX-512 loop is compiled for AVX-512 by a target attribute and
// runs only on a CPU that has it.
#include "bench/gemm_options_peak.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace fjit::bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// GFLOP/s of `iters` iterations of 12 independent FMA chains acc = a * b + acc on `lanes`-wide
// vectors. The chains start from different values: chains the compiler could prove equal it
// would merge into one (latency-bound) chain. All values stay normal: no denormal slow path.
template <class V, class Set1, class Fma>
double fma_loop_gflops(Set1 set1, int lanes, Fma fma, int64_t iters) {
  constexpr int kAcc = 12;
  V acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = set1(1.0 + 0.125 * i);
  const V a = set1(1e-3), b = set1(1e-4);
  const double t0 = now_s();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = fma(a, b, acc[i]);
  }
  const double dt = now_s() - t0;
  V s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = fma(s, b, acc[i]);
  volatile V sink = s;  // the accumulators are used, so the loop stays
  (void)sink;
  return 2.0 * kAcc * lanes * static_cast<double>(iters) / dt * 1e-9;
}

// The same loop on zmm registers, for a CPU with AVX-512 whatever the build's flags: written
// out without templates, compiled for AVX-512 by its target attribute (fjit's kernels choose
// AVX-512 at run time, so their peak must be measured the same way).
#define FJIT_AVX512 __attribute__((target("avx512f,fma")))
FJIT_AVX512 double fma512_loop_gflops(bool f64, int64_t iters) {
  constexpr int kAcc = 12;
  __m512 acc[kAcc];
  __m512d accd[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(float(1.0 + 0.125 * i));
  for (int i = 0; i < kAcc; ++i) accd[i] = _mm512_set1_pd(1.0 + 0.125 * i);
  const __m512 a = _mm512_set1_ps(1e-3f), b = _mm512_set1_ps(1e-4f);
  const __m512d ad = _mm512_set1_pd(1e-3), bd = _mm512_set1_pd(1e-4);
  const double t0 = now_s();
  if (f64) {
    for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
      for (int i = 0; i < kAcc; ++i) accd[i] = _mm512_fmadd_pd(ad, bd, accd[i]);
    }
  } else {
    for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
      for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    }
  }
  const double dt = now_s() - t0;
  __m512 s = acc[0];
  __m512d sd = accd[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_fmadd_ps(s, b, acc[i]);
  for (int i = 1; i < kAcc; ++i) sd = _mm512_fmadd_pd(sd, bd, accd[i]);
  alignas(64) float out[16];
  alignas(64) double outd[8];
  _mm512_store_ps(out, s);
  _mm512_store_pd(outd, sd);
  volatile float sink = out[0] + float(outd[0]);  // the accumulators are used, so the loop stays
  (void)sink;
  return 2.0 * kAcc * (f64 ? 8 : 16) * static_cast<double>(iters) / dt * 1e-9;
}
#undef FJIT_AVX512

template <class Run>
double best_of_5(Run run) {
  cpu_set_t old, one;
  sched_getaffinity(0, sizeof(old), &old);
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  sched_setaffinity(0, sizeof(one), &one);
  double best = 0;
  for (int r = 0; r < 5; ++r) best = std::max(best, run(int64_t{10'000'000}));
  sched_setaffinity(0, sizeof(old), &old);
  return best;
}

template <class V, class Set1, class Fma>
double best_of_5(Set1 set1, int lanes, Fma fma) {
  return best_of_5([&](int64_t iters) { return fma_loop_gflops<V>(set1, lanes, fma, iters); });
}

// The f32 loop on ymm registers (AVX2 + FMA).
double avx2_f32_gflops(int64_t iters) {
  auto set1 = [](double v) { return _mm256_set1_ps(float(v)); };
  auto fma = [](__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); };
  return fma_loop_gflops<__m256>(set1, 8, fma, iters);
}

}  // namespace

FmaPeak measure_fma_peak() {
  FmaPeak p;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::printf("FMA peak: this CPU has no AVX2+FMA; fractions of peak are not printed\n");
    return p;
  }
  p.isa = "AVX2+FMA";
  p.f32_gflops = best_of_5(avx2_f32_gflops);
  p.f64_gflops = best_of_5<__m256d>([](double v) { return _mm256_set1_pd(v); }, 4,
                                    [](__m256d a, __m256d b, __m256d c) { return _mm256_fmadd_pd(a, b, c); });
  p.avx2_f32_gflops = p.f32_gflops;
  std::printf("FMA peak, one core, AVX2+FMA (12 chains of _mm256_fmadd, best of 5): "
              "f32 %.1f GFLOP/s, f64 %.1f GFLOP/s\n", p.f32_gflops, p.f64_gflops);
  if (__builtin_cpu_supports("avx512f")) {
    const double f32 = best_of_5([](int64_t iters) { return fma512_loop_gflops(false, iters); });
    const double f64 = best_of_5([](int64_t iters) { return fma512_loop_gflops(true, iters); });
    std::printf("FMA peak, one core, AVX-512 (12 chains of _mm512_fmadd, best of 5): "
                "f32 %.1f GFLOP/s, f64 %.1f GFLOP/s\n", f32, f64);
    if (f32 > p.f32_gflops) p = {f32, std::max(f64, p.f64_gflops), "AVX-512", p.avx2_f32_gflops};
  }
  return p;
}

double fma_peak_sample(bool avx512) {
  constexpr int64_t kIters = 1'000'000;
  return avx512 ? fma512_loop_gflops(false, kIters) : avx2_f32_gflops(kIters);
}

}  // namespace fjit::bench
