// The square root every fast kernel uses (unary sqrt, the compiled fused programs): one
// functor with Eigen's packet interface, so that a packet and a scalar give the same bits for
// the same input whoever evaluates them.
#pragma once

#include "core/base/eigen.h"

#include <cmath>
#include <limits>
#include <type_traits>

namespace fjit::kernels::ew {

// Eigen's float psqrt under EIGEN_FAST_MATH (its default) is rsqrt plus a Newton step: 1-2
// bits off the correctly rounded std::sqrt, so an element's bits would depend on whether it
// falls in a packet or in a buffer's scalar tail (and AVX-512's turns sqrt(+inf) into NaN).
// Where the ISA has it, this uses the exact, correctly rounded instruction, as std::sqrt is;
// elsewhere it keeps Eigen's packet sqrt and fixes the +inf lane.
template <class T>
struct SqrtOp {
  T operator()(const T& x) const { return std::sqrt(x); }
  template <class P>
  P packetOp(const P& x) const {
    using namespace Eigen::internal;
    // (sizeof, not is_same: naming the vector types in a template drops their attributes)
#ifdef EIGEN_VECTORIZE_AVX512
    if constexpr (sizeof(P) == 64 && std::is_same_v<T, float>) return _mm512_sqrt_ps(x);
    else if constexpr (sizeof(P) == 64 && std::is_same_v<T, double>) return _mm512_sqrt_pd(x);
    else
#endif
#ifdef EIGEN_VECTORIZE_AVX
    if constexpr (sizeof(P) == 32 && std::is_same_v<T, float>) return _mm256_sqrt_ps(x);
    else if constexpr (sizeof(P) == 32 && std::is_same_v<T, double>) return _mm256_sqrt_pd(x);
    else
#endif
#ifdef EIGEN_VECTORIZE_SSE2
    if constexpr (sizeof(P) == 16 && std::is_same_v<T, float>) return _mm_sqrt_ps(x);
    else if constexpr (sizeof(P) == 16 && std::is_same_v<T, double>) return _mm_sqrt_pd(x);
    else
#endif
    {
      const P inf = pset1<P>(std::numeric_limits<T>::infinity());
      return pselect(pcmp_eq(x, inf), inf, psqrt(x));
    }
  }
};

}  // namespace fjit::kernels::ew

namespace Eigen::internal {
template <class T>
struct functor_traits<fjit::kernels::ew::SqrtOp<T>> {
  enum { Cost = 5 * NumTraits<T>::MulCost, PacketAccess = packet_traits<T>::HasSqrt };
};
}  // namespace Eigen::internal

