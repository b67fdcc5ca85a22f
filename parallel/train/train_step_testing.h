// Test-only seam of the training step (parallel/train/train_step.h): a silent data corruption
// on demand. When set before a step is traced, replica `replica`'s gradient of parameter
// `param` has the sign bit of its first element flipped (a single-bit flip: x * -1 changes
// that bit alone) at step `step` (counting from 1, as step records do), before the all-reduce;
// every other step and replica computes as without it. The language model's step
// (parallel/lm/lm_step.h) reads it too. Tests of certified runs use it to show fjit_verify
// and the sentinel finding the flip. Never set in production code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/trace/tensor.h"

namespace fjit::training::testing {

struct GradientFlip {
  int64_t step = 1;
  int replica = 0;
  std::string param;
};

inline std::optional<GradientFlip>& gradient_flip() {
  static std::optional<GradientFlip> flip;
  return flip;
}

// g with the flip applied (traced): element 0's sign flipped on replica flip.replica of axis
// `axis` when step (the step index, an i32 scalar) is flip.step - 1; g unchanged otherwise.
Tensor flipped_gradient(const Tensor& g, const GradientFlip& flip, const Tensor& step, const std::string& axis);

}  // namespace fjit::training::testing
