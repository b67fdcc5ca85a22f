// BLIS through its typed API, bli_sgemm_ex, with a runtime object per call that carries the
// thread count (compiled only when CMake found BLIS). Not through cblas: OpenBLAS, linked
// into the same program, exports the same cblas_sgemm.
#include <blis.h>

#include "bench/gemm_options_libs.h"

namespace fjit::bench {
namespace {

int threads = 1;

// Transposes are strides: element (i, p) of op(A) is at a[i * rs_a + p * cs_a].
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
           float* c) {
  float one = 1.0f, zero = 0.0f;
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(threads, &rntm);
  bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, const_cast<float*>(a),
               ta ? 1 : k, ta ? m : 1, const_cast<float*>(b), tb ? 1 : n, tb ? k : 1, &zero, c,
               n, 1, nullptr, &rntm);
}

}  // namespace

LibraryGemm blis_gemm() {
  LibraryGemm g;
  g.name = "BLIS";
  g.about = std::string("BLIS ") + bli_info_get_version_str() + ", kernels for " +
            bli_arch_string(bli_arch_query_id());
  g.set_threads = [](int n) { threads = n; };
  g.sgemm = sgemm;
  return g;
}

}  // namespace fjit::bench
