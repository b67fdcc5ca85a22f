// The instruction-set features the library is compiled with, read from the compiler's own
// macros in a file built with the library's flags. Only constants: nothing here runs code.
#include "core/base/cpu_features.h"

namespace fjit::cpu_detail {

constexpr BuildFeatures kBuiltWith = {
#ifdef __AVX__
    true,
#else
    false,
#endif
#ifdef __AVX2__
    true,
#else
    false,
#endif
#ifdef __FMA__
    true,
#else
    false,
#endif
#ifdef __F16C__
    true,
#else
    false,
#endif
#ifdef __BMI2__
    true,
#else
    false,
#endif
#ifdef __AVX512F__
    true,
#else
    false,
#endif
#ifdef __AVX512BW__
    true,
#else
    false,
#endif
#ifdef __AVX512VL__
    true,
#else
    false,
#endif
#ifdef __AVX512DQ__
    true,
#else
    false,
#endif
#ifdef __AVX512BF16__
    true,
#else
    false,
#endif
};
const BuildFeatures& built_with() { return kBuiltWith; }

}  // namespace fjit::cpu_detail
