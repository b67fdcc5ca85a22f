// Eigen, as fjit includes it. Every fjit file that uses Eigen includes this header instead of
// <Eigen/Core>, so that warnings which are false positives in third-party code are silenced
// here, at the include, and nowhere else:
//  - GCC 12 reports the deliberately undefined register of _mm512_undefined_ps() and its
//    siblings (GCC's own avx512fintrin.h, reached through Eigen's AVX-512 packet code) as
//    "may be used uninitialized" wherever Eigen's AVX-512 paths are inlined.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)  // clang knows neither the false positive nor its flag
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
