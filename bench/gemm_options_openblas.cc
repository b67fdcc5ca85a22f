// OpenBLAS through its own cblas.h (compiled only when CMake found OpenBLAS). Its thread
// count is process-wide (openblas_set_num_threads).
#include <cblas.h>

#include "bench/gemm_options_libs.h"

namespace fjit::bench {
namespace {

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
           float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a,
              static_cast<blasint>(ta ? m : k), b, static_cast<blasint>(tb ? k : n), 0.0f, c,
              static_cast<blasint>(n));
}

}  // namespace

LibraryGemm openblas_gemm() {
  LibraryGemm g;
  g.name = "OpenBLAS";
  g.about = openblas_get_config();
  g.set_threads = [](int n) { openblas_set_num_threads(n); };
  g.sgemm = sgemm;
  return g;
}

}  // namespace fjit::bench
