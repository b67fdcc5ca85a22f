// The odometer of the strided copies (core/kernels/structural/layout.cc,
// core/kernels/fused/copy_group.cc): positions over `n` dimensions of extents ext[], each
// stepping an input offset by is[] and an output offset by os[].
#pragma once

#include <cstdint>

namespace fjit::kernels {

inline constexpr int kMaxWalkDims = 32;

// Calls body(in offset, out offset) for positions [c0, c1) in row-major order, starting from
// offsets io, oo at position 0. REQUIRES: n <= kMaxWalkDims.
template <class Body>
inline void strided_walk(int n, const int64_t* ext, const int64_t* is, const int64_t* os, int64_t io,
                         int64_t oo, int64_t c0, int64_t c1, Body&& body) {
  int64_t idx[kMaxWalkDims] = {};
  for (int64_t d = n - 1, rest = c0; d >= 0; --d) {  // position c0's index
    idx[d] = rest % ext[d];
    rest /= ext[d];
    io += idx[d] * is[d];
    oo += idx[d] * os[d];
  }
  for (int64_t c = c0; c < c1; ++c) {
    body(io, oo);
    for (int d = n - 1; d >= 0; --d) {
      io += is[d];
      oo += os[d];
      if (++idx[d] < ext[d]) break;
      io -= is[d] * ext[d];
      oo -= os[d] * ext[d];
      idx[d] = 0;
    }
  }
}

}  // namespace fjit::kernels
