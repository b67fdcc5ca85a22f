// Helpers shared by the control-flow tests: deterministic f64 inputs and one row of a
// stacked tensor (what a scan body sees), for loops unrolled by hand as oracles.
#pragma once

#include <cmath>

#include "core/ir/array.h"
#include "core/trace/ops.h"

namespace fjit::testing {

// scale * sin(0.7 i + phase) at flat index i: smooth, non-repeating, the same every run.
inline Array ramp(Shape s, double scale, double phase = 0.3) {
  Array a(DType::f64, s);
  for (int64_t i = 0; i < a.size(); ++i) a.data<double>()[i] = scale * std::sin(0.7 * static_cast<double>(i) + phase);
  return a;
}

// Row i of xs along axis 0, without that axis.
inline Tensor row(const Tensor& xs, int64_t i) {
  Shape s = xs.shape();
  Axes starts(s.size(), 0), limits(s.begin(), s.end());
  starts[0] = i;
  limits[0] = i + 1;
  s.erase(s.begin());
  return reshape(slice(xs, starts, limits), s);
}

}  // namespace fjit::testing
