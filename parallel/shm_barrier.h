// ShmBarrier: the rendezvous of N threads that every thread-backend collective is built on.
//
// Promises:
//  - Sense-reversing: reusable back to back with no reset, each party keeping one bool.
//  - Release/acquire: everything a party wrote before arriving is visible to every party
//    after the barrier returns (collectives publish buffer pointers this way).
//  - Waiting spins briefly, then yields, then sleeps on a futex (woken by the last arrival),
//    and honours a StallPolicy through the Waiter callbacks.
//  - Constructed with process_shared, it may live in memory that several processes map (the
//    MPI backend's shared-memory window): its atomics are lock-free, so address-free, and its
//    futex is then a shared one.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/kernels/collective/communicator.h"
#include "parallel/stall_inspector.h"

namespace fjit {

class ShmBarrier {
 public:
  // What a waiting party is told while it waits (called only on the slow path).
  class Waiter {
   public:
    virtual ~Waiter() = default;
    // Polled while waiting; true makes arrive_and_wait return false at once.
    virtual bool cancelled() const = 0;
    // Called before each sleep of a waiting party.
    virtual void on_sleep() {}
    virtual void on_warn(double waited_seconds) = 0;
    [[noreturn]] virtual void on_abort(double waited_seconds) = 0;
  };

  explicit ShmBarrier(int parties, bool process_shared = false);

  // REQUIRES: `local_sense` is this party's own flag, false before its first arrival.
  // Returns true once all parties have arrived; false if the waiter reported cancellation
  // (the barrier is then unusable: the arrival has been counted).
  bool arrive_and_wait(bool* local_sense, const StallPolicy& policy, Waiter& waiter);

  // Wakes every sleeping party so it re-polls Waiter::cancelled().
  void wake_all();

 private:
  const int parties_;
  const int futex_flags_;  // 0 across processes, FUTEX_PRIVATE_FLAG within one
  const WaitPacing pacing_;
  // Separate cache lines: arrivals hammer remaining_, waiters spin reading sense_.
  alignas(64) std::atomic<int> remaining_;
  alignas(64) std::atomic<uint32_t> sense_{0};
  std::atomic<int> sleepers_{0};
};

}  // namespace fjit
