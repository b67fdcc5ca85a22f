#include "parallel/stall_policy.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/base/log.h"

namespace fjit {

namespace {

// A malformed variable keeps the default: a typo in a limit must not end a long job early.
void read_seconds(const char* name, std::chrono::milliseconds* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(seconds) || seconds < 0) {
    log().warn("{}='{}' is not a number of seconds; keeping {} ms", name, text, out->count());
    return;
  }
  *out = std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

}  // namespace

StallPolicy StallPolicy::from_environment() {
  StallPolicy policy;
  read_seconds("FJIT_STALL_WARN_S", &policy.warn_after);
  read_seconds("FJIT_STALL_ABORT_S", &policy.abort_after);
  return policy;
}

}  // namespace fjit
