#include "core/compile/memory_plan.h"

#include <algorithm>
#include <map>

namespace fjit {
namespace {
constexpr int64_t kAlign = 64;
int64_t aligned(int64_t n) { return std::max<int64_t>(kAlign, (n + kAlign - 1) / kAlign * kAlign); }

// Best-fit free list over [0, end) with coalescing; grows the end when nothing fits.
class FreeList {
 public:
  int64_t allocate(int64_t size) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
    if (best == free_.end()) {
      // Extend: reuse a free block that ends at the current end, if any.
      if (!free_.empty()) {
        auto last = std::prev(free_.end());
        if (last->first + last->second == end_) {
          const int64_t off = last->first;
          end_ = off + size;
          free_.erase(last);
          return off;
        }
      }
      const int64_t off = end_;
      end_ += size;
      return off;
    }
    const int64_t off = best->first, rest = best->second - size;
    free_.erase(best);
    if (rest > 0) free_[off + size] = rest;
    return off;
  }
  void release(int64_t off, int64_t size) {
    auto it = free_.emplace(off, size).first;
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  int64_t end() const { return end_; }

 private:
  std::map<int64_t, int64_t> free_;  // offset -> size
  int64_t end_ = 0;
};
}  // namespace

MemoryPlan plan_memory(const std::vector<PlannedValue>& values) {
  MemoryPlan plan;
  const int n = static_cast<int>(values.size());
  plan.offset.assign(n, -1);
  std::vector<int64_t> size(n);
  std::vector<bool> released(n, false);
  std::multimap<int, int> dies_at;  // instruction -> values whose last use it is
  for (int v = 0; v < n; ++v) {
    size[v] = aligned(values[v].bytes);
    dies_at.emplace(values[v].last_use, v);
  }
  FreeList fl;
  int64_t live = 0;
  int v = 0;
  int last_def = n ? values.back().def : 0;
  for (int instr = 0; instr <= last_def; ++instr) {
    for (; v < n && values[v].def == instr; ++v) {
      for (int c : values[v].in_place_candidates) {
        if (c >= 0 && !released[c] && values[c].last_use == instr && size[c] == size[v] &&
            plan.offset[c] >= 0) {
          plan.offset[v] = plan.offset[c];
          released[c] = true;  // ownership passes to v
          live -= size[c];
          break;
        }
      }
      if (plan.offset[v] < 0) plan.offset[v] = fl.allocate(size[v]);
      live += size[v];
      plan.min_live_bytes = std::max(plan.min_live_bytes, live);
    }
    auto [lo, hi] = dies_at.equal_range(instr);
    for (auto it = lo; it != hi; ++it) {
      const int d = it->second;
      if (released[d] || plan.offset[d] < 0) continue;
      released[d] = true;
      fl.release(plan.offset[d], size[d]);
      live -= size[d];
    }
  }
  plan.arena_bytes = fl.end();
  return plan;
}

}  // namespace fjit
