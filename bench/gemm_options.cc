// The GEMM options for the training step, side by side (issue 18): fjit's own matmul (a jitted
// one-matmul function), Eigen's plain product, and OpenBLAS, BLIS and oneDNN when they were
// found at configure time (bench/gemm_options_libs.h), against one core's measured FMA peak
// (bench/gemm_options_peak.h).
//
//   taskset -c 0 build/bench/gemm_options [--rounds 7] [--ms 20]
//
// Printed:
// - the f32 and f64 FMA peak of the core it runs on, before the products and again after;
// - per product of the MLP 784-512-512-10 batch-128 step (forward x@W, weight gradients
//   x^T@g, input gradients g@W^T, as bench/mlp_reference.h computes them) and the CNN's
//   largest convolution as its patches GEMM (conv2 of examples/lib/models.cc: 14x14 images,
//   3x3x32 -> 64 channels, batch 128), and the language model's products (examples' GPT: 2048
//   rows, width 384, MLP 1536): each candidate's median time over rounds in which the
//   candidates take turns (each round runs every candidate for about --ms milliseconds), its
//   GFLOP/s and fraction of the f32 peak, the median and range over rounds of its time divided
//   by fjit's in the same round, its max |difference| from fjit's result relative to fjit's
//   max |value| (beyond 1e-4 the candidate is not timed and the exit status is 1), and whether
//   its bits are the same with 1 and with 2 threads;
// - per candidate, the MLP step's 8 products together: their FLOPs over the sum of the
//   medians, as GFLOP/s and as a fraction of the peak (RESULT lines for bench/run_all.sh);
// - the whole SGD training step of that MLP (bench/gemm_options_step.h): its products' FLOPs
//   over its median time, as a fraction of the peak.
// Everything runs with 1 thread except the 2-thread run of the bits check; pin the process to
// one core (taskset) so that the peak and the products are measured on the same core.
#include "core/base/eigen.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/gemm_options_libs.h"
#include "bench/gemm_options_peak.h"
#include "bench/gemm_options_step.h"
#include "core/base/isa.h"
#include "core/kernels/gemm/gemm_library.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "parallel/fjit.h"

using namespace fjit;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
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
  std::string name, missing, about;
  std::function<void(int)> set_threads;
  // Runs the product; returns the result's M*N floats (valid until the next call).
  std::function<const float*(const Product&)> run;
};

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Candidate fjit_candidate() {
  // One jitted one-matmul function per product (so none is recompiled), each with its own
  // output Array that run_into reuses. FJIT_GEMM is applied as the first jit would, before the
  // description names the library.
  apply_process_environment();
  using Fn = std::function<Tensor(const Tensor&, const Tensor&)>;
  struct Entry {
    std::unique_ptr<Jitted<Fn>> fn;
    Array out;
  };
  auto entries = std::make_shared<std::map<const Product*, Entry>>();
  return {"fjit matmul", "",
          std::string("jit(matmul(a, b, ta, tb)), run_into a kept output; plain products on ") +
              (gemm_library_enabled()                          ? gemm_library_name()
               : packed_gemm_use() != PackedGemmUse::never ? packed_gemm_name()
                                                           : "fjit's Eigen driver") +
              " (FJIT_GEMM=eigen: the driver; FJIT_ISA=avx2: the AVX2 kernel)",
          [](int n) { set_intra_op_threads(n); },
          [entries](const Product& p) {
            Entry& e = (*entries)[&p];
            if (!e.fn) {
              const bool ta = p.ta, tb = p.tb;
              JitOptions options;
              options.name = "gemm_options";
              e.fn = std::make_unique<Jitted<Fn>>(jit(
                  Fn([ta, tb](const Tensor& a, const Tensor& b) { return matmul(a, b, ta, tb); }),
                  options));
            }
            e.fn->run_into(e.out, p.a, p.b);
            return e.out.data<float>();
          }};
}

Candidate eigen_candidate() {
  auto c = std::make_shared<RowMajor>();
  return {"Eigen product", "", "C.noalias() = A * B on row-major Maps, Eigen::setNbThreads",
          [](int n) { Eigen::setNbThreads(n); },
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
  return {lib.name, lib.missing, lib.about, lib.set_threads, [c, gemm](const Product& p) {
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

// One product's verdict and timings for each candidate.
struct Measured {
  double rel_err = 0;  // max |difference from fjit's result| / fjit's max |value|
  bool ok = false, same_bits = false;
  std::vector<double> per_call, ratio;  // per round: seconds per call, and that / fjit's
  std::vector<double> of_peak;          // per round: GFLOP/s / the FMA peak sampled that round
};

// How the FMA peak is sampled in each round (peak_kind), and every round's sample (the
// denominators of the step-wide fractions).
enum class PeakKind { none, avx2, avx512 };
PeakKind peak_kind = PeakKind::none;
std::vector<double> round_peaks;

// Checks every candidate's result against fjit's (live[0]) with 1 thread, and its 1-thread
// result against its 2-thread result bit for bit.
void check(std::vector<Candidate*>& live, const Product& p, std::vector<Measured>& m) {
  std::vector<float> ref = result_of(*live[0], p, 1);
  float ref_max = 0;
  for (float v : ref) ref_max = std::max(ref_max, std::fabs(v));
  for (size_t c = 0; c < live.size(); ++c) {
    std::vector<float> r1 = result_of(*live[c], p, 1), r2 = result_of(*live[c], p, 2);
    double e = 0;
    for (size_t i = 0; i < r1.size(); ++i) {
      double d = std::fabs(double(r1[i]) - ref[i]);
      if (!(d <= e)) e = d;  // keeps NaN
    }
    m[c].rel_err = e / std::max(ref_max, 1e-30f);
    m[c].ok = m[c].rel_err <= 1e-4;  // NaN fails too
    m[c].same_bits = std::memcmp(r1.data(), r2.data(), r1.size() * sizeof(float)) == 0;
  }
}

// Round robin: per round each correct candidate runs for about `ms` (its repetition count
// fixed by one calibration call), A B C A B C ..., then the FMA peak is sampled; records each
// round's time per call, and each candidate's fraction of that round's peak.
void time_rounds(std::vector<Candidate*>& live, const Product& p, int rounds, double ms,
                 std::vector<Measured>& m) {
  const size_t nc = live.size();
  std::vector<int> reps(nc, 1);
  for (size_t c = 0; c < nc; ++c) {
    if (!m[c].ok) continue;
    live[c]->run(p);  // warm: packing buffers, caches
    double t0 = now_s();
    live[c]->run(p);
    reps[c] = std::max(1, int(ms * 1e-3 / std::max(now_s() - t0, 1e-7)));
  }
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> t(nc);
    for (size_t c = 0; c < nc; ++c) {
      if (!m[c].ok) continue;
      double t0 = now_s();
      for (int i = 0; i < reps[c]; ++i) live[c]->run(p);
      t[c] = (now_s() - t0) / reps[c];
      m[c].per_call.push_back(t[c]);
    }
    for (size_t c = 0; c < nc; ++c)
      if (m[c].ok) m[c].ratio.push_back(t[c] / t[0]);
    if (peak_kind == PeakKind::none) continue;
    const double peak = bench::fma_peak_sample(peak_kind == PeakKind::avx512);
    round_peaks.push_back(peak);
    for (size_t c = 0; c < nc; ++c)
      if (m[c].ok) m[c].of_peak.push_back(p.flops() / t[c] * 1e-9 / peak);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  double ms = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ms")) ms = std::atof(argv[i + 1]);
  }
  if (rounds < 1 || ms <= 0 || argc % 2 == 0) {
    std::fprintf(stderr, "usage: %s [--rounds N >= 1] [--ms MILLISECONDS > 0]\n", argv[0]);
    return 2;
  }
  set_intra_op_threads(1);
  Eigen::setNbThreads(1);
  // FJIT_GEMM and FJIT_ISA, as the first jit applies them: the peak is that of the instruction
  // set fjit's kernels use (FJIT_ISA=avx2 on an AVX-512 CPU: the AVX2 loop's).
  apply_process_environment();
  const bench::FmaPeak peak = bench::measure_fma_peak();
  const bool avx2_only = active_isa() == Isa::avx2;
  const double peak_gflops = avx2_only ? peak.avx2_f32_gflops : peak.f32_gflops;
  if (peak_gflops > 0) {
    std::printf("RESULT FMA peak, one core, f32 (%s; fjit's kernels: %s) | %.1f GFLOP/s | best "
                "of 5; \"of peak\" divides by the same loop run again after each round\n",
                avx2_only ? "AVX2+FMA" : peak.isa.c_str(), isa_description(), peak_gflops);
    peak_kind = avx2_only || peak.isa != "AVX-512" ? PeakKind::avx2 : PeakKind::avx512;
  }

  std::vector<Product> prods;
  prods.push_back(make_product("fwd x@W1    [128,784]x[784,512]", false, false, 128, 784, 512, true, 1));
  prods.push_back(make_product("fwd h1@W2   [128,512]x[512,512]", false, false, 128, 512, 512, true, 2));
  prods.push_back(make_product("fwd h2@W3   [128,512]x[512,10]", false, false, 128, 512, 10, true, 3));
  prods.push_back(make_product("dW1 x^T@g1  [784,128]x[128,512]", true, false, 784, 128, 512, true, 4));
  prods.push_back(make_product("dW2 h1^T@g2 [512,128]x[128,512]", true, false, 512, 128, 512, true, 5));
  prods.push_back(make_product("dW3 h2^T@g3 [512,128]x[128,10]", true, false, 512, 128, 10, true, 6));
  prods.push_back(make_product("dh2 g3@W3^T [128,10]x[10,512]", false, true, 128, 10, 512, true, 7));
  prods.push_back(make_product("dh1 g2@W2^T [128,512]x[512,512]", false, true, 128, 512, 512, true, 8));
  prods.push_back(make_product("CNN conv2 patches@W [25088,288]x[288,64]", false, false, 25088, 288, 64,
                               false, 9));
  // The language model's products (examples' GPT: batch 8 x 256 tokens, width 384).
  prods.push_back(make_product("LM qkv x@Wqkv [2048,384]x[384,1152]", false, false, 2048, 384, 1152,
                               false, 10));
  prods.push_back(make_product("LM proj a@Wo  [2048,384]x[384,384]", false, false, 2048, 384, 384,
                               false, 11));
  prods.push_back(make_product("LM up x@W1    [2048,384]x[384,1536]", false, false, 2048, 384, 1536,
                               false, 12));
  prods.push_back(make_product("LM dx g@W1^T  [2048,1536]x[1536,384]", false, true, 2048, 1536, 384,
                               false, 13));

  std::vector<Candidate> cands = {fjit_candidate(), eigen_candidate()};
  for (const auto& lib : bench::library_gemms()) cands.push_back(library_candidate(lib));
  std::vector<Candidate*> live;
  for (auto& c : cands) {
    std::printf("%-14s %s\n", c.name.c_str(), c.missing.empty() ? c.about.c_str() : c.missing.c_str());
    if (c.missing.empty()) live.push_back(&c);
  }

  const size_t nc = live.size();
  std::vector<double> mlp_seconds(nc, 0.0);
  std::vector<bool> mlp_complete(nc, true);
  double mlp_flops = 0;
  std::vector<double> mlp_peaks;  // the peak samples of the MLP products' rounds
  bool all_ok = true;
  for (const Product& p : prods) {
    std::vector<Measured> m(nc);
    check(live, p, m);
    const size_t peaks_before = round_peaks.size();
    time_rounds(live, p, rounds, ms, m);
    if (p.mlp) {
      mlp_flops += p.flops();
      mlp_peaks.insert(mlp_peaks.end(), round_peaks.begin() + peaks_before, round_peaks.end());
    }
    std::printf("\n%s  (M=%lld N=%lld K=%lld, %.1f MFLOP)\n", p.what.c_str(), (long long)p.m,
                (long long)p.n, (long long)p.k, p.flops() * 1e-6);
    std::printf("  %-14s %10s %8s %7s %7s %15s %8s %s\n", "candidate", "median us", "GFLOP/s",
                "of peak", "vs fjit", "(range)", "rel err", "bits same 1 vs 2 threads");
    for (size_t c = 0; c < nc; ++c) {
      if (!m[c].ok) {
        std::printf("  %-14s WRONG RESULT (max relative error %.3g): not timed\n",
                    live[c]->name.c_str(), m[c].rel_err);
        mlp_complete[c] = false;
        all_ok = false;
        continue;
      }
      const double s = median(m[c].per_call), gf = p.flops() / s * 1e-9;
      if (p.mlp) mlp_seconds[c] += s;
      const auto [lo, hi] = std::minmax_element(m[c].ratio.begin(), m[c].ratio.end());
      char range[32];
      std::snprintf(range, sizeof range, "(%.2f-%.2f)", *lo, *hi);
      std::printf("  %-14s %10.1f %8.1f %6.0f%% %6.2fx %15s %8.1e %s\n", live[c]->name.c_str(),
                  s * 1e6, gf, 100 * median(m[c].of_peak), median(m[c].ratio), range, m[c].rel_err,
                  m[c].same_bits ? "yes" : "NO");
    }
  }
  std::printf("\nThe MLP 784-512-512-10 batch-128 step's 8 products together (%.1f MFLOP), the sum "
              "of the medians:\n", mlp_flops * 1e-6);
  // The sum's fraction divides by the median of the peaks sampled in those products' rounds.
  const double mlp_peak = median(mlp_peaks);
  for (size_t c = 0; c < nc; ++c) {
    if (!mlp_complete[c]) continue;
    const double gf = mlp_flops / mlp_seconds[c] * 1e-9;
    const bool target = c == 0 && mlp_peak > 0;  // issue 29: fjit's products >= 85% of the peak
    std::printf("RESULT MLP step GEMMs, %s, 1 thread | %.1f us, %.1f GFLOP/s | %.0f%% of the "
                "f32 FMA peak, %.2fx fjit's time%s%s\n",
                live[c]->name.c_str(), mlp_seconds[c] * 1e6, gf,
                mlp_peak > 0 ? 100 * gf / mlp_peak : 0.0, mlp_seconds[c] / mlp_seconds[0],
                target ? " (target >= 85%: " : "",
                target ? (gf >= 0.85 * mlp_peak ? "met)" : "NOT met)") : "");
  }
  // The whole step: the products, and everything else the step does (issue 29: >= 80%).
  const bench::StepTiming step = bench::time_large_mlp_step(
      rounds, 10 * ms,
      peak_kind == PeakKind::none
          ? nullptr
          : +[] { return bench::fma_peak_sample(peak_kind == PeakKind::avx512); });
  if (step.of_peak > 0) {
    const double gf = step.flops / step.seconds * 1e-9;
    std::printf("RESULT whole MLP 784-512-512-10 b128 SGD step, 1 thread | %.1f us, %.1f GFLOP/s "
                "(%.1f MFLOP) | %.0f%% of the f32 FMA peak, per round (target >= 80%%: %s)\n",
                step.seconds * 1e6, gf, step.flops * 1e-6, 100 * step.of_peak,
                step.of_peak >= 0.80 ? "met" : "NOT met");
  }
  // The clock of a shared or power-managed core drifts: the best-of-5 peak again, for comparison.
  const bench::FmaPeak after = bench::measure_fma_peak();
  if (peak_gflops > 0 && !round_peaks.empty()) {
    const auto [lo, hi] = std::minmax_element(round_peaks.begin(), round_peaks.end());
    std::printf("(the f32 peak, best of 5, was %.1f GFLOP/s before the products and %.1f after; "
                "the samples after each round ranged %.1f-%.1f)\n", peak_gflops,
                avx2_only ? after.avx2_f32_gflops : after.f32_gflops, *lo, *hi);
  }
  if (!all_ok) std::printf("some candidate's result differs from fjit's: see WRONG RESULT above\n");
  return all_ok ? 0 : 1;
}
