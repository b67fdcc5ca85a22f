// The GEMM options for the training step, side by side (issue 18): fjit's own matmul (through
// jit), Eigen's plain product, and OpenBLAS, BLIS and oneDNN when they were found at configure
// time (bench/gemm_options_libs.h), against one core's measured FMA peak.
//
//   build/bench/gemm_options [--rounds 7] [--ms 20]
//
// Printed:
// - the FMA peak of one core, f32 and f64: a loop of 12 independent fused multiply-adds per
//   iteration (enough to cover FMA latency times throughput), the thread pinned to one CPU;
//   the AVX-512 loop too when the build has AVX-512 (-march=native on such a machine), and the
//   peak is the larger;
// - per product of the MLP 784-512-512-10 batch-128 step (forward x@W, weight gradients
//   x^T@g, input gradients g@W^T) and one CNN convolution (patches [25088, 288] x [288, 64]):
//   each candidate's median time over rounds in which the candidates take turns (each round
//   runs every candidate for about --ms milliseconds), its GFLOP/s and fraction of the f32
//   peak, the median over rounds of its time divided by fjit's in the same round, whether its
//   result matches fjit's (max |difference| <= 1e-4 * max |fjit's|; a candidate that does not
//   is not timed), and whether its bits are the same with 1 and with 2 threads;
// - per candidate, the MLP step's products together: their FLOPs over the sum of the medians,
//   as GFLOP/s and as a fraction of the peak (RESULT lines for bench/run_all.sh).
// Everything runs with 1 thread except the 2-thread run of the bits check.
#include <immintrin.h>
#include <sched.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/gemm_options_libs.h"
#include "parallel/fjit.h"

using namespace fjit;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// --- FMA peak ---------------------------------------------------------------------------

template <class V, class Fma>
double fma_loop_gflops(V init, int lanes, Fma fma, int64_t iters) {
  constexpr int kAcc = 12;
  V acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = init;
  const V a = init, b = init;
  double t0 = now_s();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = fma(a, b, acc[i]);
  }
  double dt = now_s() - t0;
  V s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = fma(s, b, acc[i]);
  volatile auto sink = s;  // keeps the loop
  (void)sink;
  return 2.0 * kAcc * lanes * iters / dt * 1e-9;
}

// Best of 5 runs of about 0.1 s, the thread pinned to the CPU it is on.
template <class V, class Fma>
double fma_peak(V init, int lanes, Fma fma) {
  cpu_set_t old, one;
  sched_getaffinity(0, sizeof(old), &old);
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  sched_setaffinity(0, sizeof(one), &one);
  double best = 0;
  for (int r = 0; r < 5; ++r) best = std::max(best, fma_loop_gflops(init, lanes, fma, 10'000'000));
  sched_setaffinity(0, sizeof(old), &old);
  return best;
}

struct Peak { double f32 = 0, f64 = 0; std::string isa = "AVX2"; };

Peak measure_peak() {
  Peak p;
  p.f32 = fma_peak(_mm256_set1_ps(1e-7f), 8, [](__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); });
  p.f64 = fma_peak(_mm256_set1_pd(1e-7), 4, [](__m256d a, __m256d b, __m256d c) { return _mm256_fmadd_pd(a, b, c); });
  std::printf("FMA peak, one core, AVX2 (12 accumulators): f32 %.1f GFLOP/s, f64 %.1f GFLOP/s\n", p.f32, p.f64);
#ifdef __AVX512F__
  double f32 = fma_peak(_mm512_set1_ps(1e-7f), 16, [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); });
  double f64 = fma_peak(_mm512_set1_pd(1e-7), 8, [](__m512d a, __m512d b, __m512d c) { return _mm512_fmadd_pd(a, b, c); });
  std::printf("FMA peak, one core, AVX-512 (12 accumulators): f32 %.1f GFLOP/s, f64 %.1f GFLOP/s\n", f32, f64);
  if (f32 > p.f32) p = {f32, std::max(f64, p.f64), "AVX-512"};
#endif
  std::printf("RESULT FMA peak, one core, f32 (%s) | %.1f GFLOP/s | the denominator below\n", p.isa.c_str(), p.f32);
  std::printf("RESULT FMA peak, one core, f64 (%s) | %.1f GFLOP/s |\n\n", p.isa.c_str(), p.f64);
  return p;
}

// --- Products and candidates --------------------------------------------------------------

struct Product {
  std::string what;
  bool ta, tb, mlp;
  int64_t m, n, k;
  Array a, b;  // a: [m,k] or, with ta, [k,m]; b: [k,n] or, with tb, [n,k]
  double flops() const { return 2.0 * m * n * k; }
};

Product make_product(std::string what, bool ta, bool tb, int64_t m, int64_t k, int64_t n, bool mlp,
                     uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> a(m * k), b(k * n);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  Product p{std::move(what), ta, tb, mlp, m, n, k, {}, {}};
  p.a = Array::from_vector(a, ta ? Shape{k, m} : Shape{m, k});
  p.b = Array::from_vector(b, tb ? Shape{n, k} : Shape{k, n});
  return p;
}

struct Candidate {
  std::string name, missing;
  std::function<void(int)> set_threads;
  // Runs the product; returns the result's M*N floats (valid until the next call).
  std::function<const float*(const Product&)> run;
};

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Candidate fjit_candidate() {
  // One jitted function per transpose pair, each with its own output Array.
  struct State {
    std::function<void(const Array&, const Array&, Array&)> fn[4];
    Array out[4];
  };
  auto st = std::make_shared<State>();
  for (int t = 0; t < 4; ++t) {
    bool ta = t & 1, tb = t & 2;
    using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
    auto f = std::make_shared<Jitted<Fn>>(
        jit(Fn([ta, tb](const Tensor& a, const Tensor& b) { return matmul(a, b, ta, tb); })));
    st->fn[t] = [f](const Array& a, const Array& b, Array& out) { f->run_into(out, a, b); };
  }
  return {"fjit matmul", "", [](int n) { set_intra_op_threads(n); },
          [st](const Product& p) {
            int t = (p.ta ? 1 : 0) | (p.tb ? 2 : 0);
            st->fn[t](p.a, p.b, st->out[t]);
            return st->out[t].data<float>();
          }};
}

Candidate eigen_candidate() {
  auto c = std::make_shared<RowMajor>();
  return {"Eigen product", "", [](int n) { Eigen::setNbThreads(n); },
          [c](const Product& p) {
            c->resize(p.m, p.n);
            const float* a = p.a.data<float>();
            const float* b = p.b.data<float>();
            Eigen::Map<const RowMajor> A(a, p.ta ? p.k : p.m, p.ta ? p.m : p.k);
            Eigen::Map<const RowMajor> B(b, p.tb ? p.n : p.k, p.tb ? p.k : p.n);
            if (!p.ta && !p.tb) c->noalias() = A * B;
            else if (p.ta && !p.tb) c->noalias() = A.transpose() * B;
            else if (!p.ta && p.tb) c->noalias() = A * B.transpose();
            else c->noalias() = A.transpose() * B.transpose();
            return static_cast<const float*>(c->data());
          }};
}

Candidate library_candidate(const bench::LibraryGemm& lib) {
  auto c = std::make_shared<std::vector<float>>();
  auto gemm = lib.sgemm;
  return {lib.name, lib.missing, lib.set_threads, [c, gemm](const Product& p) {
            c->resize(p.m * p.n);
            gemm(p.ta, p.tb, p.m, p.n, p.k, p.a.data<float>(), p.b.data<float>(), c->data());
            return static_cast<const float*>(c->data());
          }};
}

std::vector<float> result_of(Candidate& c, const Product& p, int threads) {
  c.set_threads(threads);
  const float* r = c.run(p);
  std::vector<float> out(r, r + p.m * p.n);
  c.set_threads(1);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  double ms = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ms")) ms = std::atof(argv[i + 1]);
  }
  if (rounds < 1 || ms <= 0) {
    std::fprintf(stderr, "usage: %s [--rounds N >= 1] [--ms MILLISECONDS > 0]\n", argv[0]);
    return 2;
  }
  set_intra_op_threads(1);
  Eigen::setNbThreads(1);
  Peak peak = measure_peak();

  std::vector<Product> prods;
  prods.push_back(make_product("fwd  x@W1     [128,784]x[784,512]", false, false, 128, 784, 512, true, 1));
  prods.push_back(make_product("fwd  h@W2     [128,512]x[512,512]", false, false, 128, 512, 512, true, 2));
  prods.push_back(make_product("fwd  h@W3     [128,512]x[512,10]", false, false, 128, 512, 10, true, 3));
  prods.push_back(make_product("dW1  x^T@g    [784,128]x[128,512]", true, false, 784, 128, 512, true, 4));
  prods.push_back(make_product("dW2  h^T@g    [512,128]x[128,512]", true, false, 512, 128, 512, true, 5));
  prods.push_back(make_product("dW3  h^T@g    [512,128]x[128,10]", true, false, 512, 128, 10, true, 6));
  prods.push_back(make_product("dh2  g@W3^T   [128,10]x[10,512]", false, true, 128, 10, 512, true, 7));
  prods.push_back(make_product("dh1  g@W2^T   [128,512]x[512,512]", false, true, 128, 512, 512, true, 8));
  prods.push_back(make_product("conv patches@W [25088,288]x[288,64]", false, false, 25088, 288, 64, false, 9));

  std::vector<Candidate> cands = {fjit_candidate(), eigen_candidate()};
  for (const auto& lib : bench::library_gemms()) cands.push_back(library_candidate(lib));
  for (const auto& c : cands)
    if (!c.missing.empty()) std::printf("%s: %s\n", c.name.c_str(), c.missing.c_str());
  std::vector<Candidate*> live;
  for (auto& c : cands)
    if (c.missing.empty()) live.push_back(&c);

  const size_t nc = live.size();
  std::vector<double> mlp_seconds(nc, 0.0);
  std::vector<bool> mlp_complete(nc, true);
  double mlp_flops = 0;
  bool all_ok = true;
  for (const Product& p : prods) {
    if (p.mlp) mlp_flops += p.flops();
    std::vector<float> ref = result_of(*live[0], p, 1);
    float ref_max = 0;
    for (float v : ref) ref_max = std::max(ref_max, std::fabs(v));
    std::vector<bool> ok(nc), same_bits(nc);
    std::vector<double> err(nc);
    for (size_t c = 0; c < nc; ++c) {
      std::vector<float> r1 = result_of(*live[c], p, 1), r2 = result_of(*live[c], p, 2);
      double e = 0;
      for (size_t i = 0; i < r1.size(); ++i) e = std::max(e, double(std::fabs(r1[i] - ref[i])));
      err[c] = e;
      ok[c] = e <= 1e-4 * ref_max;  // NaN fails too
      same_bits[c] = std::memcmp(r1.data(), r2.data(), r1.size() * sizeof(float)) == 0;
      if (!ok[c]) all_ok = false;
    }
    // Round robin: per round, each candidate runs for about `ms` (the repetition count fixed
    // from one calibration run), the round's time per call recorded.
    std::vector<int> reps(nc);
    for (size_t c = 0; c < nc; ++c) {
      double t0 = now_s();
      live[c]->run(p);
      double dt = std::max(now_s() - t0, 1e-7);
      reps[c] = std::max(1, int(ms * 1e-3 / dt));
    }
    std::vector<std::vector<double>> per_call(nc), ratio(nc);
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> t(nc);
      for (size_t c = 0; c < nc; ++c) {
        if (!ok[c]) continue;
        double t0 = now_s();
        for (int i = 0; i < reps[c]; ++i) live[c]->run(p);
        t[c] = (now_s() - t0) / reps[c];
        per_call[c].push_back(t[c]);
      }
      for (size_t c = 0; c < nc; ++c)
        if (ok[c]) ratio[c].push_back(t[c] / t[0]);
    }
    std::printf("%s  (M=%lld N=%lld K=%lld, %.1f MFLOP)\n", p.what.c_str(), (long long)p.m,
                (long long)p.n, (long long)p.k, p.flops() * 1e-6);
    std::printf("  %-14s %10s %9s %8s %11s %10s %s\n", "candidate", "median us", "GFLOP/s",
                "of peak", "vs fjit", "max |err|", "bits independent of threads");
    for (size_t c = 0; c < nc; ++c) {
      if (!ok[c]) {
        std::printf("  %-14s WRONG RESULT (max |err| %.3g, fjit's max |value| %.3g): not timed\n",
                    live[c]->name.c_str(), err[c], ref_max);
        mlp_complete[c] = false;
        continue;
      }
      double s = median(per_call[c]);
      if (p.mlp) mlp_seconds[c] += s;
      double gf = p.flops() / s * 1e-9;
      std::printf("  %-14s %10.1f %9.1f %7.0f%% %10.2fx %10.2g %s\n", live[c]->name.c_str(),
                  s * 1e6, gf, 100 * gf / peak.f32, median(ratio[c]), err[c],
                  same_bits[c] ? "yes" : "no");
    }
  }
  std::printf("\nThe MLP 784-512-512-10 batch-128 step's 8 products together (%.1f MFLOP), the sum of "
              "the medians:\n", mlp_flops * 1e-6);
  for (size_t c = 0; c < nc; ++c) {
    if (!mlp_complete[c]) continue;
    double gf = mlp_flops / mlp_seconds[c] * 1e-9;
    std::printf("RESULT MLP step GEMMs, %s, 1 thread | %.1f us, %.1f GFLOP/s | %.0f%% of the "
                "f32 FMA peak (target 75%%)\n", live[c]->name.c_str(), mlp_seconds[c] * 1e6, gf,
                100 * gf / peak.f32);
  }
  if (!all_ok) std::printf("some candidate's result differs from fjit's: see WRONG RESULT above\n");
  return all_ok ? 0 : 1;
}
