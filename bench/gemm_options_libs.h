// The optional GEMM libraries that bench/gemm_options compares with fjit's own matmul, each
// behind one row-major single-precision entry point: C[M,N] = op(A) * op(B), op(A) = A [M,K] or,
// with ta, A stored [K,M] and transposed; op(B) = B [K,N] or, with tb, B stored [N,K].
//
// Each library is reached through its own header in its own file (gemm_options_openblas.cc,
// _blis.cc, _dnnl.cc), compiled only when CMake found the library (bench/CMakeLists.txt).
// OpenBLAS and BLIS both export the cblas_* and BLAS symbols, so only OpenBLAS is called
// through cblas; BLIS is called through its own typed API (bli_sgemm_ex), whose names are
// its alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fjit::bench {

struct LibraryGemm {
  std::string name;
  std::string missing;  // why it is not measured; empty when it is compiled in
  std::string about;    // version and build, as the library reports them
  // Sets the threads the library's GEMM uses from the next call on (on the calling thread).
  void (*set_threads)(int n) = nullptr;
  void (*sgemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                const float* b, float* c) = nullptr;
};

// OpenBLAS, BLIS, oneDNN, in that order, found or not.
std::vector<LibraryGemm> library_gemms();

// Defined only in the files of the libraries that were found.
LibraryGemm openblas_gemm();
LibraryGemm blis_gemm();
LibraryGemm dnnl_gemm();

}  // namespace fjit::bench
