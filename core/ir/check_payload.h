// The contract between automatic check nodes, the check kernel and the report.
//
// A check node is Op::Check with inputs [pred, values...] and attrs.index = site id. A user
// check has attrs.axis = 0 and scalar values, which the kernel records as they are. An
// automatic check has attrs.axis = its CheckKind and one value input: the whole tensor it
// checks (the op's result, or the operand for domain, division and index checks). Only when
// the predicate fails does the kernel scan that tensor (so a passing step costs nothing
// extra) and record the summary below; attrs.scalar carries the kind's bound.
#pragma once

#include <cmath>

#include "core/ir/check_site.h"

namespace fjit::check_payload {

enum Slot : int {
  kBadCount = 0,    // elements that broke the check
  kFirstIndex = 1,  // flat index of the first of them
  kFirstValue = 2,  // its value
  kDetail = 3,      // as the kind's CheckDetail says (core/ir/check_kinds.def): the NaN count,
                    // the element count, or the bound
};

// What an automatic check of `kind` counts as bad, given attrs.scalar = bound: the kind's
// BadRule (core/ir/check_kinds.def).
inline bool is_bad(CheckKind kind, double v, double bound) {
  switch (check_kind_info(kind).bad) {
    case BadRule::kNonFinite: return !std::isfinite(v);
    case BadRule::kZero: return v == 0;
    case BadRule::kOutsideRange: return v < 0 || v >= bound;
    case BadRule::kBelowBound: return v < bound;
    case BadRule::kOutsideLengthRange: return v < 1 || v > bound;
    case BadRule::kNeverBad: return false;
  }
  return false;
}

}  // namespace fjit::check_payload
