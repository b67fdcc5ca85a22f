// Internal to core/base/cpu_support.cc: the features the library was compiled with.
#pragma once

namespace fjit::cpu_detail {

struct BuildFeatures {
  bool avx, avx2, fma, f16c, bmi2, avx512f, avx512bw, avx512vl, avx512dq, avx512bf16;
};
// Compiled with the library's own flags (core/base/cpu_features.cc).
const BuildFeatures& built_with();

}  // namespace fjit::cpu_detail
