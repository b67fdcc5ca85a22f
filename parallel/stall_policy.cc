#include "parallel/stall_policy.h"

#include "core/base/config.h"

namespace fjit {

// The rows' defaults are StallPolicy's (a malformed value keeps them, with a warning).
static_assert(config::row(config::Id::stall_warn_s).fallback == 30 &&
              config::row(config::Id::stall_abort_s).fallback == 300);

StallPolicy StallPolicy::from_environment() {
  StallPolicy policy;
  policy.warn_after = config::stall_warn_s();
  policy.abort_after = config::stall_abort_s();
  return policy;
}

}  // namespace fjit
