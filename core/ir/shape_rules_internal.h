// Internal: what the shape rules' files share (core/ir/shape_rules.cc, window_shape_rules.cc).
#pragma once

#include <span>
#include <string>

#include "core/ir/shape_rules.h"

namespace fjit::shape_rules_internal {

// A rule's failure: the message names the problem; the caller adds the op and the site.
[[noreturn]] inline void fail(const std::string& msg) { throw ShapeRuleError(msg); }

inline void require_dtype(const ValueType& t, bool ok, const char* what) {
  if (!ok) fail(std::string("expects ") + what + ", got " + type_str(t.dtype, t.shape));
}

// The window ops' rules (window_shape_rules.cc): patches and patches_adjoint (`hint`: the
// adjoint's image type), max_pool and max_pool_grad.
ValueType patches_type(Op op, const Attrs& a, const ValueType& x, const ValueType& hint);
ValueType max_pool_type(Op op, const Attrs& a, std::span<const ValueType> ins);

}  // namespace fjit::shape_rules_internal
