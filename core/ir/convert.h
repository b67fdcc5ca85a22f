// Element conversions between the dtypes' element types (core/ir/dtype.h): the one
// definition of what `cast` does, shared by the kernels, the reference kernels, constant
// folding and host arrays.
//
// The rules:
//   - any -> bool is `x != 0` (NaN is true); bool -> number is 0/1 (any nonzero byte is true).
//   - float -> i32, u32, u8 truncates toward zero, saturates out-of-range values to the
//     type's ends, and maps NaN to 0 (never UB).
//   - integer -> integer wraps (keeps the low bits, two's complement).
//   - f16 and bf16 convert through f32 (exact from them; one rounding to them from f32, two
//     from f64), round to nearest even.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/base/eigen.h"

#include "core/ir/dtype.h"

namespace fjit {

// True for the element types of the storage-only dtypes (no arithmetic is instantiated on them).
template <class T>
inline constexpr bool kStorageOnlyElement =
    std::is_same_v<T, u8_t> || std::is_same_v<T, uint32_t> || std::is_same_v<T, f16_t> ||
    std::is_same_v<T, bf16_t>;

// The value of a storage-only element in a type C++ computes with: u8 as int32_t, f16 and
// bf16 as float (exact); any other type as itself.
inline int32_t widen(u8_t x) { return x.v; }
inline float widen(f16_t x) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(x.bits)); }
inline float widen(bf16_t x) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(x.bits));
}
template <class T> inline T widen(T x) { return x; }

// Float to an unsigned or signed integer of [lo, hi]: NaN -> 0, truncation toward zero,
// saturation at the ends. Written without branches so that loops over it vectorize; `high`
// is the largest From below hi + 1 (float has no value between 2147483520 and 2^31).
template <class To, class From>
inline To saturate_float(From x, From low, From high, double top) {
  From y = x != x ? From(0) : x;
  y = y < low ? low : y;
  y = y > high ? high : y;
  const To r = static_cast<To>(y);
  return x >= From(top) ? std::numeric_limits<To>::max() : r;
}

// Converts one element between the element types of core/ir/dtype.h.
template <class To, class From>
inline To convert_element(From x) {
  if constexpr (std::is_same_v<From, u8_t> || std::is_same_v<From, f16_t> ||
                std::is_same_v<From, bf16_t>) {
    return convert_element<To>(widen(x));
  } else if constexpr (std::is_same_v<To, uint8_t>) {
    return x != From(0) ? 1 : 0;
  } else if constexpr (std::is_same_v<From, uint8_t>) {
    if constexpr (std::is_same_v<To, u8_t>) return u8_t{x};
    else if constexpr (std::is_same_v<To, f16_t> || std::is_same_v<To, bf16_t>)
      return convert_element<To>(float(x != 0 ? 1 : 0));
    else return x != 0 ? To(1) : To(0);
  } else if constexpr (std::is_same_v<To, f16_t>) {
    return f16_t{Eigen::numext::bit_cast<uint16_t>(Eigen::half(static_cast<float>(x)))};
  } else if constexpr (std::is_same_v<To, bf16_t>) {
    return bf16_t{Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(static_cast<float>(x)))};
  } else if constexpr (std::is_same_v<To, u8_t>) {
    if constexpr (std::is_floating_point_v<From>)
      return u8_t{saturate_float<uint8_t>(x, From(0), From(255), 256.0)};
    else
      return u8_t{static_cast<uint8_t>(x)};  // integers wrap: the low 8 bits
  } else if constexpr (std::is_same_v<To, uint32_t> && std::is_floating_point_v<From>) {
    constexpr From kHigh = std::is_same_v<From, float> ? From(4294967040.0) : From(4294967295.0);
    return saturate_float<uint32_t>(x, From(0), kHigh, 4294967296.0);
  } else if constexpr (std::is_same_v<To, int32_t> && std::is_floating_point_v<From>) {
    constexpr From kHigh = std::is_same_v<From, float> ? From(2147483520.0) : From(2147483647.0);
    return saturate_float<int32_t>(x, From(-2147483648.0), kHigh, 2147483648.0);
  } else {
    return static_cast<To>(x);  // integer to integer wraps (two's complement)
  }
}

// Element i of a buffer of dtype t, as a double (exact but for u32/i32 beyond 2^53: never).
inline double element_as_double(DType t, const void* p, int64_t i) {
  return visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    return convert_element<double>(static_cast<const T*>(p)[i]);
  });
}

// Stores v converted by the rules above into element i of a buffer of dtype t.
inline void set_element_from_double(DType t, void* p, int64_t i, double v) {
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    static_cast<T*>(p)[i] = convert_element<T>(v);
  });
}

}  // namespace fjit
