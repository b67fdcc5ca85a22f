// Standalone probe of BLIS (not built by CMake; bench/RESULTS.md, issue 30, has the command):
// whether C = op(A) op(B) computed in column panels (panels of B and C) has the bits of the
// whole product, over random shapes, transpositions, f32/f64 and 1 or 2 threads, in four
// modes; then the cost of panels of a given width on a 2048^3 f32 product, one thread.
//   sup-any     BLIS's small-matrix path on, panels of any width
//   sup-small-m m under the small-matrix thresholds, small-matrix path on, any width
//   native-any  the small-matrix path off (whole and panels), any width
//   native-wide every dimension over the thresholds (the whole on the native path), panels
//               of 512 or more with the small-matrix path off
// Build: g++ -O2 -std=c++20 -I/usr/include/x86_64-linux-gnu bench/blis_panels_probe.cc -lblis
// Run with BLIS_ARCH_TYPE=<id> for a kernel set other than the CPU's (3 haswell, 6 zen3, 0 skx).
#include <blis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

template <class T>
void gemm(bool ta, bool tb, long m, long k, long n, const T* a, const T* b, T* c, long n0, long w,
          int threads, bool native) {
  T one = 1, zero = 0;
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(threads, &rntm);
  if (native) bli_rntm_disable_l3_sup(&rntm);
  const inc_t rsa = ta ? 1 : k, csa = ta ? m : 1, rsb = tb ? 1 : n, csb = tb ? k : 1;
  T* bp = const_cast<T*>(b) + n0 * csb;
  if constexpr (sizeof(T) == 4)
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, w, k, &one, const_cast<T*>(a), rsa, csa, bp, rsb,
                 csb, &zero, c + n0, n, 1, nullptr, &rntm);
  else
    bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, w, k, &one, const_cast<T*>(a), rsa, csa, bp, rsb,
                 csb, &zero, c + n0, n, 1, nullptr, &rntm);
}

enum Mode { kSupAny, kSupSmallM, kNativeAny, kNativeWide };
const char* kModeNames[] = {"sup-any", "sup-small-m", "native-any", "native-wide"};

template <class T>
void sweep(Mode mode, std::mt19937& rng, int trials) {
  int bad = 0;
  for (int t = 0; t < trials; ++t) {
    long m = 1 + rng() % 700, k = 1 + rng() % 700, n = 17 + rng() % 700;
    if (mode == kSupSmallM) m = 1 + rng() % 190;
    if (mode == kNativeWide) m = 512 + rng() % 700, k = 512 + rng() % 700, n = 1024 + rng() % 1500;
    const bool ta = rng() & 1, tb = rng() & 1;
    const int threads = 1 + (rng() & 1);
    std::vector<T> a(m * k), b(k * n), whole(m * n), cut(m * n);
    std::normal_distribution<double> nd;
    for (auto& x : a) x = nd(rng);
    for (auto& x : b) x = nd(rng);
    const bool native = mode == kNativeAny || mode == kNativeWide;
    gemm<T>(ta, tb, m, k, n, a.data(), b.data(), whole.data(), 0, n, threads, native);
    const long w = mode == kNativeWide ? 512 + rng() % 500 : 1 + rng() % n;
    for (long n0 = 0; n0 < n;) {
      long width = std::min(w, n - n0);
      if (mode == kNativeWide && n - n0 - width < 512) width = n - n0;  // no narrow last panel
      gemm<T>(ta, tb, m, k, n, a.data(), b.data(), cut.data(), n0, width, threads, native);
      n0 += width;
    }
    if (std::memcmp(whole.data(), cut.data(), sizeof(T) * m * n) != 0 && bad++ < 3)
      std::printf("  differs: m %ld k %ld n %ld panel %ld ta %d tb %d threads %d\n", m, k, n, w, ta, tb, threads);
  }
  std::printf("%s %-12s %d of %d shapes differ\n", sizeof(T) == 4 ? "f32" : "f64", kModeNames[mode], bad, trials);
}

int main() {
  std::printf("BLIS %s, kernels %s\n", bli_info_get_version_str(), (bli_init(), bli_arch_string(bli_arch_query_id())));
  std::mt19937 rng(42);
  for (Mode mode : {kSupAny, kSupSmallM, kNativeAny, kNativeWide}) {
    sweep<float>(mode, rng, 50);
    sweep<double>(mode, rng, 50);
  }
  const long n = 2048;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const long widths[] = {n, 64, 128, 256, 512, 1024};
  double best[6] = {1e9, 1e9, 1e9, 1e9, 1e9, 1e9};
  for (int r = 0; r < 5; ++r)
    for (int i = 0; i < 6; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      for (long n0 = 0; n0 < n; n0 += widths[i])
        gemm<float>(false, false, n, n, n, a.data(), b.data(), c.data(), n0, std::min(widths[i], n - n0), 1, true);
      best[i] = std::min(best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  for (int i = 0; i < 6; ++i)
    std::printf("2048^3 f32 in panels of %4ld: %6.1f ms (%+.1f%%)\n", widths[i], best[i] * 1e3, 100 * (best[i] / best[0] - 1));
}
