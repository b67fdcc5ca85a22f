// check(): a run-time assertion inside traced code (JAX checkify's check, lingvo's errflag).
//
//   check(all(isfinite(logits)), "logits must be finite");
//   check(loss < 1e3, "loss {} too large (lr {:.2g})", loss, lr);
//
// At trace time check() records a CheckSite (message, file:line and function of the call,
// a captured stack) and one Op::Check node. When the plan runs, the node raises its site's
// flag if `pred` is false and keeps the values of that step; after the step the host reports
// every raised check and applies the policy (checks/step_check_handler.h). Nothing is read back mid-step.
// Reports number steps from 0: the first call of a jit function, or the first pmap step, is
// step 0 (CheckError::step()).
//
// Contracts:
//  - pred: a bool Tensor of the current trace; a non-scalar one is reduced with all() (every
//    element must hold).
//  - values: at most kMaxCheckValues scalar Tensors of any dtype (a compile-time error past
//    that), substituted for the format's replacement fields in order, fmt-style ("{}",
//    "{:.3f}", "{{" for a literal brace), with their values from the failing step. The
//    number of fields must equal the number of values.
//  - The trace's check mode decides (JitOptions::checks, else FJIT_CHECKS): under
//    CheckMode::off check() validates its arguments and records nothing, so the compiled plan
//    is exactly the one traced without the check.
//  - Misuse (no active trace, a non-bool predicate, a non-scalar value, a format that does
//    not match the values) throws TraceError naming the call site.
#pragma once

#include <source_location>
#include <span>
#include <string_view>
#include <type_traits>

#include "checks/step_check_handler.h"
#include "core/trace/tensor.h"

namespace fjit {

// The format of a check, implicitly made from a string. Its defaulted source_location is
// evaluated where the conversion happens, i.e. at the caller of check(): that is how a
// variadic function learns its call site.
struct CheckFormat {
  template <class S>
    requires std::is_convertible_v<const S&, std::string_view>
  CheckFormat(const S& s, std::source_location l = std::source_location::current())  // NOLINT
      : text(s), loc(l) {}
  std::string_view text;
  std::source_location loc;
};

namespace detail {
void check_impl(const Tensor& pred, const CheckFormat& format, std::span<const Tensor> values,
                CheckKind kind = CheckKind::user);
}  // namespace detail

template <class... V>
  requires(std::is_convertible_v<const V&, Tensor> && ...)
void check(const Tensor& pred, CheckFormat format, const V&... values) {
  static_assert(sizeof...(V) <= kMaxCheckValues, "check(): at most kMaxCheckValues values");
  const Tensor vs[sizeof...(V) + 1] = {Tensor(values)..., Tensor()};
  detail::check_impl(pred, format, std::span<const Tensor>(vs, sizeof...(V)));
}

// check() whose site has another predicate kind than user: a row of core/ir/check_kinds.def
// that reads nothing (kNothing), such as loss_scale_overflow. It reports and compiles in
// exactly as a user check does (the same modes, message and values); the kind is what the
// host sees in StepResult::raised. A kind that scans an op's values throws TraceError.
// One exception to the modes: a check of kind sentinel (parallel/train/sentinel.h) is recorded
// under CheckMode::off too, since only a run that asked for the sentinel traces one.
template <class... V>
  requires(std::is_convertible_v<const V&, Tensor> && ...)
void check_of_kind(CheckKind kind, const Tensor& pred, CheckFormat format, const V&... values) {
  static_assert(sizeof...(V) <= kMaxCheckValues, "check_of_kind(): at most kMaxCheckValues values");
  const Tensor vs[sizeof...(V) + 1] = {Tensor(values)..., Tensor()};
  detail::check_impl(pred, format, std::span<const Tensor>(vs, sizeof...(V)), kind);
}

// The number of replacement fields in an fmt-style format ("{{" and "}}" are literal).
int count_format_fields(std::string_view format);

}  // namespace fjit
