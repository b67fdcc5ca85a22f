// oneDNN's dnnl_sgemm (compiled only when CMake found oneDNN). Debian's oneDNN threads with
// OpenMP, so its thread count is the calling thread's OpenMP setting.
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <limits>

#include "bench/gemm_options_libs.h"

namespace fjit::bench {
namespace {

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
           float* c) {
  const dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a,
                                     ta ? m : k, b, tb ? k : n, 0.0f, c, n);
  // A failed call leaves NaN, which the program's check against fjit's result reports.
  if (s != dnnl_success) std::fill(c, c + m * n, std::numeric_limits<float>::quiet_NaN());
}

}  // namespace

LibraryGemm dnnl_gemm() {
  LibraryGemm g;
  g.name = "oneDNN";
  const dnnl_version_t* v = dnnl_version();
  g.about = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
            std::to_string(v->patch) + ", CPU runtime " +
            (v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "not OpenMP");
  g.set_threads = [](int n) { omp_set_num_threads(n); };
  g.sgemm = sgemm;
  return g;
}

}  // namespace fjit::bench
