// Check reports: the text a raised step turns into (logged, and the what() of CheckError).
//
// A report lists every raised check of one step in plan order (site id order), marks the first
// one and the root causes (raised checks none of whose upstream checks raised, see
// core/ir/check_upstream.h), and for each gives the replicas that raised it, the message with the
// step's values, the op for automatic checks, the call site and the user frames of the stack
// captured at trace time. It is built on the cold path only: allocation is fine here.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/compile/executable.h"

namespace fjit {

// The checks raised in one step, combined over all replicas (identical on every replica).
struct RaisedChecks {
  int64_t step = 0;
  int num_replicas = 1;
  // Per site id: the replicas that raised it, ascending; empty when it did not raise.
  std::vector<std::vector<int>> replicas;
  // Per site id: the values recorded by the first replica that raised it.
  std::vector<std::array<double, kCheckPayloadSlots>> values;  // values, then the iteration slot

  int count() const;
  bool raised(int site) const { return !replicas[site].empty(); }
  // Raised sites none of whose upstream sites raised.
  bool root_cause(const CheckSite& site, int id) const;
};

// The whole report. `function` is the jit function's name.
std::string format_check_report(const Executable& exe, const RaisedChecks& raised,
                                const char* function, CheckPolicy policy);

// One site's message: the user's format with `values` substituted (their dtypes from
// `types`), or for an automatic check, what was wrong with the op's values.
std::string check_message(const CheckSite& site, std::span<const double> values,
                          std::span<const DType> types);

// Whether `format` formats values of these dtypes; on failure `error` says why.
bool validate_check_format(const std::string& format, std::span<const DType> types, std::string* error);

// "file:line (function)" of where a site's op or check was written: its source location if it
// is the user's, else the innermost user frame of its stack (gradient ops are built inside
// fjit, so their call site is the user's grad/value_and_grad call).
std::string describe_site(const Site& site);

}  // namespace fjit
