// The optional GEMM libraries that bench/gemm_options compares with fjit's own matmul, each
// behind one row-major single-precision entry point: C[M,N] = op(A) * op(B), op(A) = A [M,K] or,
// with ta, A stored [K,M] and transposed; op(B) = B [K,N] or, with tb, B stored [N,K].
// A library is compiled in when CMake found it (bench/CMakeLists.txt); otherwise its entry
// says why it is missing and how to install it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fjit::bench {

struct LibraryGemm {
  std::string name;
  std::string missing;  // empty when the library is compiled in
  // Sets the threads the library's GEMM may use from now on.
  void (*set_threads)(int n) = nullptr;
  void (*sgemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                const float* b, float* c) = nullptr;
};

// OpenBLAS, BLIS, oneDNN, in that order, found or not.
std::vector<LibraryGemm> library_gemms();

}  // namespace fjit::bench
