#include "core/base/metrics.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/base/isa.h"
#include "nlohmann/json.hpp"

namespace fjit {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Timing::record(int64_t ns) {
  const int64_t i = count_.fetch_add(1, std::memory_order_relaxed);
  total_ns_.fetch_add(ns, std::memory_order_relaxed);
  window_[i % kWindow].store(ns, std::memory_order_relaxed);
}

int64_t Timing::percentile_ns(double p) const {
  const int64_t n = std::min<int64_t>(count(), kWindow);
  if (n == 0) return 0;
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = window_[i].load(std::memory_order_relaxed);
  const size_t k = std::min<size_t>(n - 1, static_cast<size_t>(p / 100.0 * (n - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

void Timing::reset() {
  count_ = 0;
  total_ns_ = 0;
  for (auto& w : window_) w = 0;
}

void Metrics::reset() {
  for (auto* c : {&traces, &compiles, &cache_hits, &cache_misses, &allreduce_calls,
                  &allreduce_bytes, &allreduce_shared_window, &allreduce_messages, &collective_calls, &collective_bytes, &checks_evaluated, &checks_raised, &steps_skipped, &steps})
    *c = 0;
  compile_time.reset();
  execute_time.reset();
  allreduce_time.reset();
  collective_time.reset();
}

Metrics& metrics() {
  static Metrics m;
  return m;
}

namespace {
std::string fmt_ns(int64_t ns) {
  char b[32];
  if (ns >= 1000000000) std::snprintf(b, sizeof b, "%.3fs", ns / 1e9);
  else if (ns >= 1000000) std::snprintf(b, sizeof b, "%.3fms", ns / 1e6);
  else std::snprintf(b, sizeof b, "%.3fus", ns / 1e3);
  return b;
}

std::string timing_line(const char* name, const Timing& t) {
  std::string s = std::string("  ") + name + ": count=" + std::to_string(t.count()) +
                  " total=" + fmt_ns(t.total_ns());
  if (t.count() > 0)
    s += " mean=" + fmt_ns(t.total_ns() / t.count()) + " p50=" + fmt_ns(t.percentile_ns(50)) +
         " p90=" + fmt_ns(t.percentile_ns(90)) + " p99=" + fmt_ns(t.percentile_ns(99));
  return s + "\n";
}
}  // namespace

namespace {
nlohmann::json timing_json(const Timing& t) {
  return {{"count", t.count()},
          {"total_ns", t.total_ns()},
          {"p50_ns", t.percentile_ns(50)},
          {"p90_ns", t.percentile_ns(90)},
          {"p99_ns", t.percentile_ns(99)}};
}
}  // namespace

std::string metrics_json() {
  const Metrics& m = metrics();
  nlohmann::json j = {
      {"compile",
       {{"traces", m.traces.load()}, {"compiles", m.compiles.load()},
        {"cache_hits", m.cache_hits.load()}, {"cache_misses", m.cache_misses.load()},
        {"time", timing_json(m.compile_time)}}},
      {"execute", {{"steps", m.steps.load()}, {"time", timing_json(m.execute_time)}}},
      {"allreduce",
       {{"calls", m.allreduce_calls.load()}, {"bytes", m.allreduce_bytes.load()},
        {"shared_window", m.allreduce_shared_window.load()},
        {"messages", m.allreduce_messages.load()}, {"time", timing_json(m.allreduce_time)}}},
      {"collectives",
       {{"calls", m.collective_calls.load()}, {"bytes", m.collective_bytes.load()},
        {"time", timing_json(m.collective_time)}}},
      {"checks",
       {{"evaluated", m.checks_evaluated.load()}, {"raised", m.checks_raised.load()},
        {"steps_skipped", m.steps_skipped.load()}}}};
  return j.dump();
}

std::string metrics_report() {
  const Metrics& m = metrics();
  std::string r = "fjit metrics report\n";
  r += std::string("  kernels' instruction set: ") + isa_description() + "\n";
  r += "  traces=" + std::to_string(m.traces.load()) + " compiles=" + std::to_string(m.compiles.load()) +
       " cache_hits=" + std::to_string(m.cache_hits.load()) +
       " cache_misses=" + std::to_string(m.cache_misses.load()) + "\n";
  r += timing_line("CompileTime", m.compile_time);
  r += timing_line("ExecuteTime", m.execute_time);
  r += "  allreduce: calls=" + std::to_string(m.allreduce_calls.load()) +
       " bytes=" + std::to_string(m.allreduce_bytes.load()) + "\n";
  r += timing_line("AllReduceTime", m.allreduce_time);
  if (m.allreduce_shared_window.load() + m.allreduce_messages.load() > 0)
    r += "  allreduce among MPI ranks: shared_window=" +
         std::to_string(m.allreduce_shared_window.load()) +
         " messages=" + std::to_string(m.allreduce_messages.load()) + "\n";
  r += "  other collectives: calls=" + std::to_string(m.collective_calls.load()) +
       " bytes=" + std::to_string(m.collective_bytes.load()) + "\n";
  r += timing_line("CollectiveTime", m.collective_time);
  r += "  steps=" + std::to_string(m.steps.load()) +
       " checks_evaluated=" + std::to_string(m.checks_evaluated.load()) +
       " checks_raised=" + std::to_string(m.checks_raised.load()) +
       " steps_skipped=" + std::to_string(m.steps_skipped.load()) + "\n";
  return r;
}

}  // namespace fjit
