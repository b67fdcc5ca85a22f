// The CPU's sticky floating-point exception flags, as the fpe check mode reads them
// (CheckMode::fpe, core/compile/executable.h; the rules are in checks/fpe_report.h).
//
// x86's MXCSR keeps one sticky bit per exception; an instruction that raises one sets it and
// nothing clears it but software. fjit watches three: invalid operation (0/0, inf-inf, sqrt
// or log of a negative number), division by zero (x/0, log 0) and overflow. Underflow, inexact
// and denormal happen in ordinary arithmetic and are ignored.
//
// Each thread has its own MXCSR. The plan's thread reads and clears its own around each
// instruction (take_thread_flags); the intra-op worker threads of fjit's own parallel kernels
// (core/base/threads.h) call collect_worker_flags() after each share of work, which, while
// some plan runs in fpe mode (ActiveRun), moves their flags into one process-wide word that
// the plan's thread takes after the instruction (take_worker_flags). Worker threads of a GEMM
// library (BLIS) are not fjit's: flags raised there are not seen.
//
// Off x86 every function here returns 0 and does nothing.
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FJIT_HAVE_MXCSR 1
#else
#define FJIT_HAVE_MXCSR 0
#endif

namespace fjit::fpe {

// MXCSR's exception flag bits.
inline constexpr uint32_t kInvalid = 0x01;
inline constexpr uint32_t kDivByZero = 0x04;
inline constexpr uint32_t kOverflow = 0x08;
inline constexpr uint32_t kWatched = kInvalid | kDivByZero | kOverflow;

namespace detail {
extern std::atomic<int> g_active_runs;
extern std::atomic<uint32_t> g_worker_flags;
}  // namespace detail

// The calling thread's watched flags; clears them when any is set.
inline uint32_t take_thread_flags() {
#if FJIT_HAVE_MXCSR
  const uint32_t csr = _mm_getcsr();
  const uint32_t raised = csr & kWatched;
  if (raised != 0) [[unlikely]] _mm_setcsr(csr & ~kWatched);
  return raised;
#else
  return 0;
#endif
}

// For intra-op worker threads, after a share of a parallel kernel: one relaxed load when no
// plan runs in fpe mode.
inline void collect_worker_flags() {
  if (detail::g_active_runs.load(std::memory_order_relaxed) == 0) [[likely]] return;
  if (const uint32_t f = take_thread_flags()) detail::g_worker_flags.fetch_or(f, std::memory_order_relaxed);
}

// The flags workers collected since the last call (of every plan running in fpe mode in this
// process: concurrent thread replicas share the word), cleared.
inline uint32_t take_worker_flags() {
  if (detail::g_worker_flags.load(std::memory_order_relaxed) == 0) [[likely]] return 0;
  return detail::g_worker_flags.exchange(0, std::memory_order_relaxed);
}

// While alive, worker threads collect their flags.
struct ActiveRun {
  ActiveRun() { detail::g_active_runs.fetch_add(1, std::memory_order_relaxed); }
  ~ActiveRun() { detail::g_active_runs.fetch_sub(1, std::memory_order_relaxed); }
  ActiveRun(const ActiveRun&) = delete;
  ActiveRun& operator=(const ActiveRun&) = delete;
};

// "invalid, division by zero, overflow" for the flags set in `flags`.
const char* flag_names(uint32_t flags);

}  // namespace fjit::fpe
