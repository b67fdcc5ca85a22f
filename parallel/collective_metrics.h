// Records one collective into metrics() (core/base/metrics.h) when it ends: a call, its bytes and
// its wall time, including calls that end by throwing (a cancelled thread group).
//
// Cost: two clock reads and five relaxed atomic updates per collective; no allocation, no
// lock. Only one replica per process records (`active`): with thread replicas every replica
// enters every collective, and counting each would multiply the figures by the replica count.
#pragma once

#include <cstdint>

#include "core/base/metrics.h"

namespace fjit {

enum class CollectiveKind : uint8_t { all_reduce, other };

class CollectiveRecord {
 public:
  CollectiveRecord(bool active, CollectiveKind kind, int64_t bytes)
      : active_(active), kind_(kind), bytes_(bytes), start_ns_(active ? now_ns() : 0) {}
  CollectiveRecord(const CollectiveRecord&) = delete;
  CollectiveRecord& operator=(const CollectiveRecord&) = delete;
  ~CollectiveRecord() {
    if (!active_) return;
    Metrics& m = metrics();
    const int64_t ns = now_ns() - start_ns_;
    if (kind_ == CollectiveKind::all_reduce) {
      m.allreduce_calls.fetch_add(1, std::memory_order_relaxed);
      m.allreduce_bytes.fetch_add(bytes_, std::memory_order_relaxed);
      m.allreduce_time.record(ns);
    } else {
      m.collective_calls.fetch_add(1, std::memory_order_relaxed);
      m.collective_bytes.fetch_add(bytes_, std::memory_order_relaxed);
      m.collective_time.record(ns);
    }
  }

 private:
  const bool active_;
  const CollectiveKind kind_;
  const int64_t bytes_;
  const int64_t start_ns_;
};

}  // namespace fjit
