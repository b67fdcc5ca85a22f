// Scalar definitions of the elementwise rules that are choices rather than plain C++:
// conversions (Cast, Constant fill) and integer power. These few helpers are the only code
// the fast kernels and the reference kernels share; everything else in the reference is
// written independently so it can serve as an oracle.
//
// The rules:
//   - any -> bool is `x != 0` (NaN is true); bool -> number is 0/1 (any nonzero byte is true).
//   - float -> i32 truncates toward zero, saturates out-of-range values to INT32_MIN/MAX,
//     and maps NaN to 0 (never UB).
//   - i32 arithmetic wraps around (two's complement); i32 x/0 == 0, INT32_MIN/-1 == INT32_MIN.
//   - i32 pow(b, e) is b*b*...*b (e times, wrapping); e < 0 gives 0, except b == 1 -> 1 and
//     b == -1 -> +-1; pow(b, 0) == 1 for every b.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace fjit::kernels {

// Converts one element between the storage types float, double, int32_t and uint8_t (bool).
template <class To, class From>
inline To convert_element(From x) {
  if constexpr (std::is_same_v<To, uint8_t>) {
    return x != From(0) ? 1 : 0;
  } else if constexpr (std::is_same_v<From, uint8_t>) {
    return x != 0 ? To(1) : To(0);
  } else if constexpr (std::is_same_v<To, int32_t> && std::is_floating_point_v<From>) {
    // Written without branches so that loops over it vectorize: NaN -> 0, clamp into the
    // range of values whose truncation fits, truncate, then saturate the top end (float has
    // no value between 2147483520 and 2^31).
    constexpr From kLow = From(-2147483648.0);
    constexpr From kHigh = std::is_same_v<From, float> ? From(2147483520.0) : From(2147483647.0);
    From y = x != x ? From(0) : x;
    y = y < kLow ? kLow : y;
    y = y > kHigh ? kHigh : y;
    const int32_t r = static_cast<int32_t>(y);
    return x >= From(2147483648.0) ? std::numeric_limits<int32_t>::max() : r;
  } else {
    return static_cast<To>(x);
  }
}

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
