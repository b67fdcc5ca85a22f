// Kept (thread_local) scratch buffers for kernels: grown to the largest size asked and never
// shrunk, so that the hot path allocates nothing after the first calls.
#pragma once

#include <cstdint>
#include <vector>

namespace fjit {

// Grows v to at least n elements and never shrinks it: one that shrank for a smaller product
// would zero its regrown part on every larger one.
template <class T>
void grow_scratch(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// Grows v (as grow_scratch) to hold n elements from its first 64-byte-aligned element, and
// returns that element. The same buffer gives the same alignment on every thread, so a
// vectorized sum over a row of it adds in the same order wherever it runs.
template <class T>
T* aligned_scratch(std::vector<T>& v, int64_t n) {
  static_assert(64 % sizeof(T) == 0, "aligned_scratch: an element size dividing 64");
  grow_scratch(v, n + static_cast<int64_t>(64 / sizeof(T)));
  const auto addr = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + (64 - addr % 64) % 64 / sizeof(T);
}

}  // namespace fjit
