// Splitting a memory-bound kernel's work over the intra-op threads (core/base/threads.h).
//
// split_work(units, elems, part) calls part(lo, hi) on contiguous ranges of [0, units) that
// together cover it once: on the calling thread alone when the kernel touches fewer than
// kSplitElems elements (or one thread is set), else on up to intra_op_threads() threads, one
// range each. A unit is whatever the kernel computes on its own (an image, a row of outputs,
// a column block), so a caller whose units' results do not depend on which other units run
// beside them gets the same bits on any thread count. Workers hand their floating-point
// exception flags to the plan's thread (core/base/fpe_flags.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/base/fpe_flags.h"
#include "core/base/threads.h"

namespace fjit::kernels {

// Below this many elements read or written, a kernel runs on the calling thread: a parallel
// region's start costs about as much as copying this many bytes.
inline constexpr int64_t kSplitElems = int64_t{1} << 18;

// How many threads split_work uses for `units` units touching `elems` elements.
inline int split_threads(int64_t units, int64_t elems) {
  if (elems < kSplitElems || units < 2) return 1;
  return static_cast<int>(std::min<int64_t>(units, intra_op_threads()));
}

template <class Part>
void split_work(int64_t units, int64_t elems, Part&& part) {
  const int threads = split_threads(units, elems);
  if (threads <= 1) {
    if (units > 0) part(int64_t{0}, units);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    part(units * t / threads, units * (t + 1) / threads);
    fpe::collect_worker_flags();
  }
}

}  // namespace fjit::kernels
