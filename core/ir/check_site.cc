#include "core/ir/check_site.h"

namespace fjit {

const char* check_mode_name(CheckMode m) {
  switch (m) {
    case CheckMode::off: return "off";
    case CheckMode::user: return "user";
    case CheckMode::all: return "all";
    case CheckMode::fpe: return "fpe";
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

namespace {
constexpr CheckKindInfo kCheckKinds[] = {
#define at(v) CheckBound{false, v}
#define axis_extent CheckBound{true, 0}
#define extent(operand, axis) CheckBound{true, 0, operand, axis}
#define FJIT_CHECK_KIND(name, label, bad, detail, reads, bound, message, message_no_detail) \
  {label, BadRule::bad, CheckDetail::detail, CheckReads::reads, bound, message, message_no_detail},
#include "core/ir/check_kinds.def"
#undef FJIT_CHECK_KIND
#undef extent
#undef axis_extent
#undef at
};
}  // namespace

const CheckKindInfo& check_kind_info(CheckKind k) { return kCheckKinds[static_cast<int>(k)]; }
const char* check_kind_name(CheckKind k) { return check_kind_info(k).label; }

}  // namespace fjit
