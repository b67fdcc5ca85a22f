// library_gemms(): the libraries CMake found (FJIT_BENCH_HAVE_*), and for the others why not.
// No library header is included here.
#include "bench/gemm_options_libs.h"

namespace fjit::bench {
namespace {

[[maybe_unused]] LibraryGemm not_found(const char* name, const char* package) {
  LibraryGemm g;
  g.name = name;
  g.missing = std::string("not measured: not found at configure time (apt-get install ") +
              package + ", then re-run cmake)";
  return g;
}

}  // namespace

std::vector<LibraryGemm> library_gemms() {
  std::vector<LibraryGemm> out;
#ifdef FJIT_BENCH_HAVE_OPENBLAS
  out.push_back(openblas_gemm());
#else
  out.push_back(not_found("OpenBLAS", "libopenblas-dev"));
#endif
#ifdef FJIT_BENCH_HAVE_BLIS
  out.push_back(blis_gemm());
#else
  out.push_back(not_found("BLIS", "libblis-dev"));
#endif
#ifdef FJIT_BENCH_HAVE_DNNL
  out.push_back(dnnl_gemm());
#else
  out.push_back(not_found("oneDNN", "libdnnl-dev"));
#endif
  return out;
}

}  // namespace fjit::bench
