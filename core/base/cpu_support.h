// What the CPU must have to run this build of fjit. The library is compiled for a fixed
// instruction set (x86-64-v3 by default: AVX2, FMA, BMI2, F16C; the build machine's with
// FJIT_NATIVE=ON). Before any other static initializer runs, fjit compares that with the CPU
// it finds itself on, and a CPU without a required feature ends the process with a message
// naming the missing features, instead of an illegal-instruction signal somewhere inside a
// kernel.
#pragma once

#include <string>

namespace fjit {

// The features this build was compiled to use, as a space-separated list ("avx2 fma ...").
std::string cpu_features_required();
// The required features this CPU lacks (empty: it runs this build).
std::string cpu_features_missing();

}  // namespace fjit
