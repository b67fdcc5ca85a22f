// One core's bf16 product peaks, measured: what bench/bf16_products divides each path's GFLOP/s
// by. Each loop keeps independent accumulators busy enough to run at the instruction's
// throughput: 4 tile accumulators for AMX's TDPBF16PS (each 16 x 16 x 32 multiply-adds), 12
// vector chains for AVX512_BF16's VDPBF16PS (16 lanes x 2 pairs). A figure is 0 where the CPU
// (or, for AMX, the process) lacks the instructions.
#pragma once

namespace fjit::bench {

struct Bf16Peak {
  double amx_gflops = 0, dpbf16_gflops = 0;
};

// Best of 5 runs of each loop.
Bf16Peak measure_bf16_peak();

}  // namespace fjit::bench
