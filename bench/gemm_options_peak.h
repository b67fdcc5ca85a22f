// One core's fused multiply-add peak, measured: what bench/gemm_options divides each GEMM's
// GFLOP/s by. The loop keeps 12 independent accumulator chains per iteration, enough to hide
// the FMA latency on every FMA unit of current x86 cores, so it runs at the core's FMA
// throughput; its compiled instructions do not depend on the build's -march flags
// (gemm_options_peak.cc is compiled for AVX2 + FMA whatever the global flags, its AVX-512 loop
// by a target attribute, run only where the CPU has AVX-512).
#pragma once

#include <string>

namespace fjit::bench {

struct FmaPeak {
  double f32_gflops = 0, f64_gflops = 0;  // 0 when the CPU lacks the ISA
  std::string isa;                        // "AVX2+FMA", or "AVX-512" when that was faster
  double avx2_f32_gflops = 0;             // the AVX2+FMA loop's f32 figure
};

// Best of 5 runs of the loop, the calling thread pinned to the CPU it is on meanwhile.
// Prints one line per ISA measured.
FmaPeak measure_fma_peak();

// One short run (a few milliseconds) of the f32 loop, AVX-512 or AVX2+FMA: the peak as it is
// now, for a ratio taken side by side with a product timed just before (a shared core's clock
// and its neighbours' load drift over a run). REQUIRES: the CPU has the ISA asked for.
double fma_peak_sample(bool avx512);

}  // namespace fjit::bench
