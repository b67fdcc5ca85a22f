// f32 -> bf16 rounding of a contiguous array, as the mixed-precision policy's casts need it:
// to nearest, ties to even; a NaN becomes the quiet NaN 0x7fc0 of its sign; denormals round
// like any other value (no flush to zero). Every variant gives the same bits for every input.
#pragma once

#include <cstdint>

namespace fjit::kernels::ew {

// One element (the scalar rule every variant follows).
inline uint16_t round_f32_to_bf16(uint32_t u) {
  const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : nearest);
}

// o[i] = round_f32_to_bf16(x[i]) for i < n, in a loop without branches that vectorizes.
inline void round_f32_to_bf16_portable(const uint32_t* x, uint16_t* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = round_f32_to_bf16(x[i]);
}

// The same with AVX-512 and AVX512_BF16's VCVTNEPS2BF16, which
// rounds the same way except that it reads denormals as zero and keeps a NaN's payload: a vector
// holding either takes the scalar rule. REQUIRES: the CPU has AVX512_BF16 (active_avx512_bf16()).
void round_f32_to_bf16_avx512(const uint32_t* x, uint16_t* o, int64_t n);

}  // namespace fjit::kernels::ew
