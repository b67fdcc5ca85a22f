// How a batch of rows is split into parts (replicas, processes, micro-batches): the one rule
// every splitter shares, so that pmap's shards, a process's rows of a global batch and
// gradient accumulation's micro-batches agree row for row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

namespace fjit {

// Part `part`'s [begin, end) rows of `rows` split over `parts` parts as evenly as possible:
// the first rows % parts parts get one row more. REQUIRES parts >= 1, 0 <= part < parts.
inline std::pair<int64_t, int64_t> split_rows(int64_t rows, int parts, int part) {
  const int64_t base = rows / parts, extra = rows % parts;
  const int64_t begin = part * base + std::min<int64_t>(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

}  // namespace fjit
