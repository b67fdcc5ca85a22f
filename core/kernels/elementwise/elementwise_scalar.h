// Scalar definitions of the elementwise rules that are choices rather than plain C++:
// conversions (Cast, Constant fill: core/ir/convert.h) and integer power. These few helpers
// are the only code the fast kernels and the reference kernels share; everything else in the
// reference is written independently so it can serve as an oracle.
//
// The rules:
//   - i32 arithmetic wraps around (two's complement); i32 x/0 == 0, INT32_MIN/-1 == INT32_MIN.
//   - i32 pow(b, e) is b*b*...*b (e times, wrapping); e < 0 gives 0, except b == 1 -> 1 and
//     b == -1 -> +-1; pow(b, 0) == 1 for every b.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/ir/convert.h"

namespace fjit::kernels {

// i32 pow with the wrapping and negative-exponent rules above.
inline int32_t pow_i32(int32_t base, int32_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e & 1) ? -1 : 1;
    return 0;
  }
  uint32_t result = 1, b = static_cast<uint32_t>(base);
  for (uint32_t k = static_cast<uint32_t>(e); k; k >>= 1) {
    if (k & 1) result *= b;
    b *= b;
  }
  return static_cast<int32_t>(result);
}

}  // namespace fjit::kernels
