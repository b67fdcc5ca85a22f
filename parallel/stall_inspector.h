// StallTimer: how one waiting replica paces itself and when it must complain.
//
// Every wait in a collective (thread barrier or MPI request) runs a StallTimer. It promises:
//  - the first microseconds are spent spinning (collectives between busy replicas finish
//    there), then the waiter yields, then it sleeps in bounded slices so an idle replica
//    costs no CPU but still notices deadlines;
//  - Step::warn is returned exactly once, when StallPolicy::warn_after has passed, and
//    Step::abort once abort_after has passed (a zero limit never fires).
// The caller decides what a warning says and how the job ends; this file only keeps time.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/kernels/collective/communicator.h"
#include "parallel/stall_policy.h"

namespace fjit {

// How long a waiter spins and then yields before it sleeps. The defaults suit waiters that
// each have a core; with more waiters than cores, spinning only delays the one waited for.
struct WaitPacing {
  std::chrono::nanoseconds spin_for = std::chrono::microseconds(50);
  std::chrono::nanoseconds yield_for = std::chrono::milliseconds(2);
};
// Pacing for `waiters` threads or processes busy-waiting on this machine: the defaults when
// each can have a core, else sleep almost at once.
WaitPacing pacing_for(int waiters);

class StallTimer {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Step : uint8_t { spin, yield, sleep, warn, abort };

  explicit StallTimer(const StallPolicy& policy, WaitPacing pacing = WaitPacing{});

  // What to do before the next look at the awaited condition.
  Step next();
  // How long a Step::sleep may last: at most `longest`, and never past the next deadline.
  std::chrono::nanoseconds sleep_slice(std::chrono::nanoseconds longest) const;
  double waited_seconds() const;

 private:
  const StallPolicy& policy_;
  const WaitPacing pacing_;
  Clock::time_point start_;
  Clock::duration waited_{};
  uint32_t calls_ = 0;
  bool warned_ = false;
};

// One pause of the CPU inside a spin loop (lets the sibling hyperthread run).
void cpu_relax();

}  // namespace fjit
