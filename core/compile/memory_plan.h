// Memory planning: assigns each intermediate value of a plan a byte range in one arena,
// reusing the ranges of values that are dead (liveness by last use) and, for elementwise ops,
// computing in place over an operand that dies at that instruction.
#pragma once

#include <cstdint>
#include <vector>

namespace fjit {

struct PlannedValue {
  int64_t bytes = 0;
  int def = 0;        // instruction index that writes it
  int last_use = 0;   // last instruction index that reads it (>= def)
  // Value ids (indices into the request) it may share storage with when one of them dies at
  // `def` (same byte size, elementwise producer).
  std::vector<int> in_place_candidates;
};

struct MemoryPlan {
  std::vector<int64_t> offset;  // per value
  int64_t arena_bytes = 0;
  int64_t min_live_bytes = 0;   // the peak of the summed sizes of simultaneously live values
};

// Values must be given in order of `def`. Offsets are 64-byte aligned.
MemoryPlan plan_memory(const std::vector<PlannedValue>& values);

}  // namespace fjit
