// Metrics: process-wide counters and timing distributions, and metrics_report(), in the
// spirit of PyTorch/XLA's metrics report. Recording is lock-free and allocation-free, so it
// stays on in production: a timing keeps the last kWindow samples for percentiles plus exact
// totals.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace fjit {

class Timing {
 public:
  static constexpr int kWindow = 4096;
  void record(int64_t ns);
  int64_t count() const { return count_.load(std::memory_order_relaxed); }
  int64_t total_ns() const { return total_ns_.load(std::memory_order_relaxed); }
  // Percentile (0..100) over the retained window; 0 when empty.
  int64_t percentile_ns(double p) const;
  void reset();

 private:
  std::atomic<int64_t> count_{0}, total_ns_{0};
  std::array<std::atomic<int64_t>, kWindow> window_{};
};

struct Metrics {
  // Compilation.
  std::atomic<int64_t> traces{0}, compiles{0}, cache_hits{0}, cache_misses{0};
  Timing compile_time, execute_time;
  // Collectives, recorded by the communicator backends once per collective per process
  // (with thread replicas, replica 0 records). Bytes are one replica's buffer. "collective"
  // counts the others: broadcast, all-gather, barrier.
  std::atomic<int64_t> allreduce_calls{0}, allreduce_bytes{0};
  Timing allreduce_time;
  // All-reduces among MPI ranks by the path they took: through a shared-memory window (every
  // rank on one machine) or by messages (ranks on several machines, or no room for a window).
  std::atomic<int64_t> allreduce_shared_window{0}, allreduce_messages{0};
  std::atomic<int64_t> collective_calls{0}, collective_bytes{0};
  Timing collective_time;
  // Checks.
  std::atomic<int64_t> checks_evaluated{0}, checks_raised{0}, steps_skipped{0}, steps{0};

  void reset();
};

Metrics& metrics();
// A multi-line human-readable report of everything above.
std::string metrics_report();
// The same figures as one JSON object, for tools: {"compile": {...}, "execute": {...},
// "allreduce": {...}, "collectives": {...}, "checks": {...}}; timings in nanoseconds with
// count, total and the p50/p90/p99 of the retained window.
std::string metrics_json();

// Monotonic nanoseconds.
int64_t now_ns();

}  // namespace fjit
