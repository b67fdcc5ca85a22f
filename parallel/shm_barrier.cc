#include "parallel/shm_barrier.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

#include "parallel/stall_inspector.h"

#include "core/base/metrics.h"
#include "core/base/timeline.h"

namespace fjit {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex word must be a plain 32-bit integer");

uint32_t* futex_word(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

// Sleeps while *word == expected, at most `timeout`; spurious returns are fine (callers loop).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout,
                int flags) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  syscall(SYS_futex, futex_word(word), FUTEX_WAIT | flags, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word, int flags) {
  syscall(SYS_futex, futex_word(word), FUTEX_WAKE | flags, INT_MAX, nullptr, nullptr, 0);
}

// Sleepers are woken by the futex, so this only bounds how late a deadline is noticed.
constexpr auto kLongestSleep = std::chrono::milliseconds(20);

}  // namespace

ShmBarrier::ShmBarrier(int parties, bool process_shared)
    : parties_(parties),
      futex_flags_(process_shared ? 0 : FUTEX_PRIVATE_FLAG),
      pacing_(pacing_for(parties)),
      remaining_(parties) {}

bool ShmBarrier::arrive_and_wait(bool* local_sense, const StallPolicy& policy, Waiter& waiter) {
  const uint32_t target = *local_sense ? 0u : 1u;
  *local_sense = !*local_sense;
  if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // Last to arrive. Nobody can arrive at the next round before seeing the new sense, so
    // resetting the count first is safe. seq_cst pairs with the sleepers_ increment below:
    // either we see the sleeper, or the sleeper's futex_wait sees the new sense and returns.
    remaining_.store(parties_, std::memory_order_relaxed);
    sense_.store(target, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake(&sense_, futex_flags_);
    return true;
  }
  if (sense_.load(std::memory_order_acquire) == target) return true;
  // From here on this party waits for the others: the timeline shows it as a "wait" event.
  const int64_t wait_start = timeline::enabled() ? now_ns() : -1;
  StallTimer timer(policy, pacing_);
  while (sense_.load(std::memory_order_acquire) != target) {
    switch (timer.next()) {
      case StallTimer::Step::spin:
        cpu_relax();
        continue;  // the cancel flag is read on the slower steps only
      case StallTimer::Step::yield:
        sched_yield();
        break;
      case StallTimer::Step::sleep:
        waiter.on_sleep();
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        futex_wait(&sense_, target ^ 1u, timer.sleep_slice(kLongestSleep), futex_flags_);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        break;
      case StallTimer::Step::warn:
        waiter.on_warn(timer.waited_seconds());
        break;
      case StallTimer::Step::abort:
        waiter.on_abort(timer.waited_seconds());
    }
    if (waiter.cancelled()) return false;
  }
  if (wait_start >= 0) timeline::event("wait for replicas", "wait", wait_start, now_ns());
  return true;
}

void ShmBarrier::wake_all() { futex_wake(&sense_, futex_flags_); }

}  // namespace fjit
