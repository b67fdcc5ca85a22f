// Compiled for plain x86-64 (CMakeLists.txt), so that it runs on a CPU that lacks what the
// rest of the library was compiled for, and can say so.
#include "core/base/cpu_support.h"

#include <cstdio>
#include <cstdlib>

#include "core/base/cpu_features.h"

namespace fjit {
namespace {

struct Feature {
  bool cpu_detail::BuildFeatures::*built;
  const char* name;  // as __builtin_cpu_supports and /proc/cpuinfo spell it
  bool (*present)();
};

#define FJIT_FEATURE(field, name) \
  {&cpu_detail::BuildFeatures::field, name, [] { return __builtin_cpu_supports(name) != 0; }}
const Feature kFeatures[] = {
    FJIT_FEATURE(avx, "avx"),           FJIT_FEATURE(avx2, "avx2"),
    FJIT_FEATURE(fma, "fma"),           FJIT_FEATURE(f16c, "f16c"),
    FJIT_FEATURE(bmi2, "bmi2"),         FJIT_FEATURE(avx512f, "avx512f"),
    FJIT_FEATURE(avx512bw, "avx512bw"), FJIT_FEATURE(avx512vl, "avx512vl"),
    FJIT_FEATURE(avx512dq, "avx512dq"), FJIT_FEATURE(avx512bf16, "avx512bf16"),
};
#undef FJIT_FEATURE

std::string features(bool only_missing) {
  __builtin_cpu_init();
  std::string out;
  for (const Feature& f : kFeatures) {
    if (!(cpu_detail::built_with().*f.built) || (only_missing && f.present())) continue;
    if (!out.empty()) out += ' ';
    out += f.name;
  }
  return out;
}

// Priority 101: before the library's other static initializers, which may already use the
// wider instructions.
__attribute__((constructor(101))) void refuse_an_unsupported_cpu() {
  const std::string missing = features(true);
  if (missing.empty()) return;
  std::fprintf(stderr,
               "fjit: this build of fjit needs a CPU with %s; this CPU lacks %s. Rebuild fjit "
               "for it (the default build needs x86-64-v3: AVX2 and FMA; FJIT_NATIVE=ON builds "
               "for the build machine only).\n",
               features(false).c_str(), missing.c_str());
  std::_Exit(70);
}

}  // namespace

std::string cpu_features_required() { return features(false); }
std::string cpu_features_missing() { return features(true); }

}  // namespace fjit
