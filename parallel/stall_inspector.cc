#include "parallel/stall_inspector.h"

#include <algorithm>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace fjit {
namespace {

// Reading the clock costs more than a spin's load; while spinning, look at it only every so
// many calls.
constexpr uint32_t kSpinsPerClockRead = 64;

}  // namespace

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

WaitPacing pacing_for(int waiters) {
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores == 0 || waiters <= static_cast<int>(cores)) return WaitPacing{};
  return WaitPacing{std::chrono::microseconds(2), std::chrono::microseconds(20)};
}

StallTimer::StallTimer(const StallPolicy& policy, WaitPacing pacing)
    : policy_(policy), pacing_(pacing), start_(Clock::now()) {}

StallTimer::Step StallTimer::next() {
  ++calls_;
  if (waited_ < pacing_.spin_for && calls_ % kSpinsPerClockRead != 0) return Step::spin;
  waited_ = Clock::now() - start_;
  if (policy_.abort_after.count() > 0 && waited_ >= policy_.abort_after) return Step::abort;
  if (!warned_ && policy_.warn_after.count() > 0 && waited_ >= policy_.warn_after) {
    warned_ = true;
    return Step::warn;
  }
  if (waited_ < pacing_.spin_for) return Step::spin;
  if (waited_ < pacing_.yield_for) return Step::yield;
  return Step::sleep;
}

std::chrono::nanoseconds StallTimer::sleep_slice(std::chrono::nanoseconds longest) const {
  std::chrono::nanoseconds slice = longest;
  // Sleeping past warn_after would make the warning late by up to a slice; keep it exact.
  for (auto limit : {policy_.warn_after, policy_.abort_after}) {
    if (limit.count() > 0 && waited_ < limit) {
      slice = std::min<std::chrono::nanoseconds>(slice, limit - waited_);
    }
  }
  return std::max<std::chrono::nanoseconds>(slice, std::chrono::microseconds(1));
}

double StallTimer::waited_seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

}  // namespace fjit
