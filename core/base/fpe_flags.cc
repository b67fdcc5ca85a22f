#include "core/base/fpe_flags.h"

namespace fjit::fpe {
namespace detail {
std::atomic<int> g_active_runs{0};
std::atomic<uint32_t> g_worker_flags{0};
}  // namespace detail

const char* flag_names(uint32_t flags) {
  switch (flags & kWatched) {
    case kInvalid: return "invalid operation";
    case kDivByZero: return "division by zero";
    case kOverflow: return "overflow";
    case kInvalid | kDivByZero: return "invalid operation, division by zero";
    case kInvalid | kOverflow: return "invalid operation, overflow";
    case kDivByZero | kOverflow: return "division by zero, overflow";
    case kWatched: return "invalid operation, division by zero, overflow";
    default: return "none";
  }
}

}  // namespace fjit::fpe
