// What the GEMM kernel tests share: random operands and the kernel ISAs this CPU can run.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/base/isa.h"

namespace fjit::testing {

// n values uniform in [-1, 1), the same for the same seed.
inline std::vector<float> random_vector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// avx2 always (an x86-64-v3 build), and avx512 where the CPU has it.
inline std::vector<Isa> isas_here() {
  std::vector<Isa> v{Isa::avx2};
  if (detected_isa() == Isa::avx512) v.push_back(Isa::avx512);
  return v;
}

}  // namespace fjit::testing
