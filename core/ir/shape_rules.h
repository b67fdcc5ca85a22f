// Shape rules: for each op, the output dtype and shape from the input types and attributes.
//
// The same rule serves the tracing builders (which turn a failure into a TraceError naming
// the user's call site) and the graph verifier. A rule reports a failure by throwing
// ShapeRuleError with a message that names the problem (the caller adds op and site).
#pragma once

#include <span>
#include <stdexcept>

#include "core/ir/node.h"

namespace fjit {

struct ShapeRuleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `out_hint` carries what the builder fixes itself (the constant's/parameter's/iota's type,
// broadcast_to's and reshape's target shape, scatter_add's operand shape, cast's dtype).
ValueType infer_type(Op op, const Attrs& attrs, std::span<const ValueType> ins,
                     const ValueType& out_hint);

// NumPy broadcasting of two shapes; throws ShapeRuleError when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace fjit
