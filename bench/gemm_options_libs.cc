// The library adapters of bench/gemm_options_libs.h. Each library's entry point is declared
// here by hand or through its own header, one library per block, so that a build without it
// compiles. OpenBLAS and BLIS both export cblas_sgemm: OpenBLAS is reached through it (and
// linked first), BLIS only through its own bli_sgemm.
#include "bench/gemm_options_libs.h"

#ifdef FJIT_BENCH_HAVE_BLIS
#include <blis.h>
#endif
#ifdef FJIT_BENCH_HAVE_DNNL
#include <dnnl.h>
#endif
#include <omp.h>

#ifdef FJIT_BENCH_HAVE_OPENBLAS
extern "C" {
// Prototypes of OpenBLAS's cblas.h (its header clashes with BLIS's, so it is not included).
void cblas_sgemm(int order, int transa, int transb, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
void openblas_set_num_threads(int n);
}
#endif

namespace fjit::bench {
namespace {

#ifdef FJIT_BENCH_HAVE_OPENBLAS
void openblas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                   const float* b, float* c) {
  constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
  cblas_sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, int(m), int(n), int(k),
              1.0f, a, int(ta ? m : k), b, int(tb ? k : n), 0.0f, c, int(n));
}
#endif

#ifdef FJIT_BENCH_HAVE_BLIS
// Transposes are strides: element (i, p) of op(A) is at i*rs + p*cs.
void blis_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
               const float* b, float* c) {
  float one = 1.0f, zero = 0.0f;
  bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<float*>(a),
            ta ? 1 : k, ta ? m : 1, const_cast<float*>(b), tb ? 1 : n, tb ? k : 1, &zero, c, n, 1);
}
void blis_threads(int n) { bli_thread_set_num_threads(n); }
#endif

#ifdef FJIT_BENCH_HAVE_DNNL
void dnnl_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
               const float* b, float* c) {
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f,
             c, n);
}
#endif

// oneDNN's Debian build threads with OpenMP: the calling thread's OpenMP setting.
[[maybe_unused]] void omp_threads(int n) { omp_set_num_threads(n); }

}  // namespace

std::vector<LibraryGemm> library_gemms() {
  std::vector<LibraryGemm> out(3);
  out[0].name = "OpenBLAS";
  out[1].name = "BLIS";
  out[2].name = "oneDNN";
#ifdef FJIT_BENCH_HAVE_OPENBLAS
  out[0].set_threads = openblas_set_num_threads;
  out[0].sgemm = openblas_gemm;
#else
  out[0].missing = "not installed (apt-get install libopenblas-dev, re-run cmake)";
#endif
#ifdef FJIT_BENCH_HAVE_BLIS
  out[1].set_threads = blis_threads;
  out[1].sgemm = blis_gemm;
#else
  out[1].missing = "not installed (apt-get install libblis-dev, re-run cmake)";
#endif
#ifdef FJIT_BENCH_HAVE_DNNL
  out[2].set_threads = omp_threads;
  out[2].sgemm = dnnl_gemm;
#else
  out[2].missing = "not installed (apt-get install libdnnl-dev, re-run cmake)";
#endif
  return out;
}

}  // namespace fjit::bench
