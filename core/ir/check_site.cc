#include "core/ir/check_site.h"

namespace fjit {

const char* check_mode_name(CheckMode m) {
  switch (m) {
    case CheckMode::off: return "off";
    case CheckMode::user: return "user";
    case CheckMode::all: return "all";
  }
  return "?";
}

const char* check_policy_name(CheckPolicy p) {
  switch (p) {
    case CheckPolicy::throw_error: return "throw";
    case CheckPolicy::skip_step: return "skip_step";
    case CheckPolicy::log: return "log";
  }
  return "?";
}

const char* check_kind_name(CheckKind k) {
  switch (k) {
    case CheckKind::user: return "check";
    case CheckKind::nan: return "nan";
    case CheckKind::inf: return "inf";
    case CheckKind::div_by_zero: return "division by zero";
    case CheckKind::index_out_of_range: return "index out of range";
    case CheckKind::log_domain: return "log of a negative number";
    case CheckKind::sqrt_domain: return "sqrt of a negative number";
  }
  return "?";
}

}  // namespace fjit
