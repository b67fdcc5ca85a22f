// Internal: index helpers for the structural reference kernels (reference_structural*.cc).
// Deliberately naive (allocating, one element at a time): these are the test oracle and the
// constant folder's evaluator, so they are written to be obviously right, not fast. The fast
// kernels do not use them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ir/array.h"
#include "core/ir/convert.h"

namespace fjit::kernels::st::ref {

// Row-major multi-index of flat position `flat` in `shape`.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// Flat position of multi-index `idx` in `shape`.
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

inline double get(const Array& a, int64_t i) { return a.at_as_double(i); }

// Stores v (a value of a's dtype, or any number for bool: nonzero is true) at flat i.
inline void set(Array& a, int64_t i, double v) {
  set_element_from_double(a.dtype(), a.raw(), i, v);
}

}  // namespace fjit::kernels::st::ref
