// The kinds of check and what each one is, generated from core/ir/check_kinds.def (the one
// check-kind table). Below node.h so that the op table (op.h) can name the kind of an op's
// automatic input check.
#pragma once

#include <cstdint>

namespace fjit {

// The kinds of check, generated from core/ir/check_kinds.def (the one check-kind table).
enum class CheckKind : uint8_t {
#define FJIT_CHECK_KIND(name, ...) name,
#include "core/ir/check_kinds.def"
#undef FJIT_CHECK_KIND
};
inline constexpr int kNumCheckKinds = 0
#define FJIT_CHECK_KIND(...) +1
#include "core/ir/check_kinds.def"
#undef FJIT_CHECK_KIND
    ;
// Which checked values a kind counts as bad, and what the payload's detail slot holds.
// kOutsideRange: outside [0, bound); kOutsideLengthRange: outside [1, bound] (a length that
// must leave at least one element and at most bound).
enum class BadRule : uint8_t { kNeverBad, kNonFinite, kZero, kOutsideRange, kBelowBound, kOutsideLengthRange };
enum class CheckDetail : uint8_t { kNoDetail, kNanCount, kElementCount, kBound };
// The tensor an automatic check scans, and where its bound comes from.
// kOperand3: an optional fourth operand (attention's key lengths); no check when the op has none.
enum class CheckReads : uint8_t { kNothing, kResult, kOperand0, kOperand1, kOperand3 };
// The operand an operand check reads (-1 for kNothing and kResult).
constexpr int check_operand(CheckReads r) {
  return r == CheckReads::kOperand0 ? 0 : r == CheckReads::kOperand1 ? 1 : r == CheckReads::kOperand3 ? 3 : -1;
}
struct CheckBound {
  bool axis_extent = false;  // the size of operand `operand` along `axis` (-1: the op's axis)
  double value = 0;          // otherwise this constant
  int operand = 0;
  int axis = -1;
};
struct CheckKindInfo {
  const char* label;            // "division by zero"
  BadRule bad;
  CheckDetail detail;
  CheckReads reads;
  CheckBound bound;
  const char* message;          // the report's line; see check_kinds.def for its fields
  const char* message_no_detail;  // used instead when the detail is 0 (empty: none)
};
const CheckKindInfo& check_kind_info(CheckKind k);
const char* check_kind_name(CheckKind k);

}  // namespace fjit
