// The memory streams of a fused elementwise block and their software prefetch (internal to
// core/kernels/fused/fused_elementwise.cc).
//
// A block streams through each external operand that is walked like the output (not a
// broadcast row, column or scalar), the output and the further results. The steps read them
// one after another, so the hardware prefetchers see short bursts per stream; the next block's
// lines are requested a slice before each step of the current one instead.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace fjit::fused_streams {

// Where a block lies: its first row and column in the collapsed output, its size in elements,
// and whether it is the last, shorter block.
struct BlockAt {
  int64_t row, col, elems;
  bool last;
};

// At most kCap streams, each a base address with strides (in elements) along rows and along
// a row, and its element size.
template <int kCap>
struct Streams {
  int count = 0;
  const std::byte* base[kCap];
  int64_t s0[kCap], s1[kCap], esize[kCap];
  bool write[kCap];

  void add(const void* p, int64_t row_stride, int64_t col_stride, int64_t es, bool w) {
    base[count] = static_cast<const std::byte*>(p);
    s0[count] = row_stride;
    s1[count] = col_stride;
    esize[count] = es;
    write[count++] = w;
  }
};

// Requests the cache lines [from, to) of block `at`, numbered stream after stream; changes no
// value.
template <int kCap>
inline void prefetch_lines(const Streams<kCap>& S, const BlockAt& at, int64_t from, int64_t to) {
  int64_t first = 0;  // number of the stream's first line
  for (int k = 0; k < S.count && first < to; ++k) {
    const int64_t bytes = at.elems * S.esize[k];
    const int64_t lines = (bytes + 63) / 64;
    const std::byte* p = S.base[k] + (at.row * S.s0[k] + at.col * S.s1[k]) * S.esize[k];
    for (int64_t l = std::max<int64_t>(from - first, 0); l < std::min(lines, to - first); ++l) {
      if (S.write[k]) __builtin_prefetch(p + l * 64, 1, 2);
      else __builtin_prefetch(p + l * 64, 0, 2);
    }
    first += lines;
  }
}

}  // namespace fjit::fused_streams
