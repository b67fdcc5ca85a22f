// The step deadline of the calling thread, for long kernels that poll between blocks.
//
// The executor sets it around a step run under a deadline (core/compile/executable.h,
// RunContext::deadline_ns); a kernel reads it once on the thread that runs the instruction,
// hands the value to its worker threads, and between blocks (GEMM units, elementwise blocks)
// asks deadline_passed(): past the deadline it skips the blocks left, leaving its result
// partial, and the executor raises the step's deadline check after it. Blocks that run are
// computed exactly as without a deadline, so a deadline that is not reached changes no bit.
// The kernels that poll, and their blocks: the packed GEMM (units of tiles), BLIS products on
// its native path (column panels), the blocked GEMM driver (row blocks), fused elementwise
// (every 64 blocks), batched products (entries), compiled fused loops (ranges of elements),
// fused attention (tasks, and a backward task's key blocks), softmax cross-entropy (blocks of
// rows) and reductions (rows, column tiles, subtrees of a full sum). Not: a full max or min,
// BLIS's small-matrix path, and the kernels that are one pass over memory (layout, gather).
//
// Promises: no deadline costs one compare per block; a deadline, one read of the coarse
// monotonic clock per block (a load from the vDSO page), so it is noticed within a tick. Nothing is shared between threads but the value handed out.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

#include "core/base/metrics.h"

namespace fjit {

namespace detail {
inline thread_local int64_t t_step_deadline_ns = 0;
inline std::atomic<int64_t> g_kernel_deadline_stops{0};
}

// The calling thread's step deadline on now_ns()'s clock (0: none).
inline int64_t thread_step_deadline() { return detail::t_step_deadline_ns; }

// The monotonic clock of now_ns() at the kernel's tick resolution (CLOCK_MONOTONIC_COARSE: a
// read of the vDSO page, no timer access): at most a tick behind now_ns(), so a deadline on
// now_ns()'s clock is noticed at most a tick late.
inline int64_t coarse_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Whether `deadline_ns` (thread_step_deadline() of the thread that runs the instruction) has
// passed; never for 0. For kernels: each true answer is counted (kernel_deadline_stops).
inline bool deadline_passed(int64_t deadline_ns) {
  if (deadline_ns == 0 || coarse_now_ns() < deadline_ns) return false;
  detail::g_kernel_deadline_stops.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// For tests: how many times, in this process, a kernel asked deadline_passed() and was told to
// stop: a count that shows a kernel noticed the deadline itself (left work undone), not the
// executor between instructions.
inline int64_t kernel_deadline_stops() { return detail::g_kernel_deadline_stops.load(std::memory_order_relaxed); }

// Sets the calling thread's step deadline for its lifetime, then restores the previous one.
class ThreadStepDeadline {
 public:
  explicit ThreadStepDeadline(int64_t deadline_ns) : saved_(detail::t_step_deadline_ns) {
    detail::t_step_deadline_ns = deadline_ns;
  }
  ~ThreadStepDeadline() { detail::t_step_deadline_ns = saved_; }
  ThreadStepDeadline(const ThreadStepDeadline&) = delete;
  ThreadStepDeadline& operator=(const ThreadStepDeadline&) = delete;

 private:
  int64_t saved_;
};

}  // namespace fjit
