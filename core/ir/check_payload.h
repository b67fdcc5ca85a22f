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
  kDetail = 3,      // nan/inf: how many of the bad elements are NaN; div: the element count;
                    // index: the exclusive upper bound; log/sqrt: the domain's lower bound
};

// What an automatic check of `kind` counts as bad, given attrs.scalar = bound.
//  nan (the combined NaN/Inf check): !isfinite(v)
//  div_by_zero: v == 0
//  index_out_of_range: v < 0 || v >= bound
//  log_domain, sqrt_domain: v < bound (NaN is not counted: the NaN check reports it)
inline bool is_bad(CheckKind kind, double v, double bound) {
  switch (kind) {
    case CheckKind::nan: case CheckKind::inf: return !std::isfinite(v);
    case CheckKind::div_by_zero: return v == 0;
    case CheckKind::index_out_of_range: return v < 0 || v >= bound;
    case CheckKind::log_domain: case CheckKind::sqrt_domain: return v < bound;
    case CheckKind::user: return false;
  }
  return false;
}

}  // namespace fjit::check_payload
