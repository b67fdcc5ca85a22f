// SyncThreads: replicas as plain long-lived std::threads that meet at a barrier, the thread
// half of the "sync only" ceilings of bench/scaling_bench.cc: each replica computes a step on
// its own data and waits for the others once per step, with no data exchanged.
//
// The barrier is fjit's own ShmBarrier (spin, then yield, then futex), the wait fjit's thread
// collectives use, so the ceiling waits the way fjit does and no faster or slower. Replica 0
// runs on the calling thread; every replica runs its kernels with `intra_op_threads` threads.
#pragma once

#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/base/threads.h"
#include "parallel/shm_barrier.h"
#include "parallel/stall_policy.h"

namespace fjit::bench {

class SyncThreads {
 public:
  // REQUIRES: replicas >= 1, intra_op_threads >= 1.
  SyncThreads(int replicas, int intra_op_threads)
      : replicas_(replicas), barrier_(replicas), senses_(replicas) {
    policy_.warn_after = policy_.abort_after = std::chrono::milliseconds(0);  // never stalls
    for (int r = 1; r < replicas; ++r)
      threads_.emplace_back([this, r, intra_op_threads] {
        set_intra_op_threads(intra_op_threads);
        for (;;) {
          barrier(r);  // a block starts
          if (!task_) return;
          (*task_)(r);
          barrier(r);  // the block ends
        }
      });
  }
  ~SyncThreads() {
    task_ = nullptr;
    barrier(0);
    for (std::thread& t : threads_) t.join();
  }
  SyncThreads(const SyncThreads&) = delete;
  SyncThreads& operator=(const SyncThreads&) = delete;

  int size() const { return replicas_; }

  // Runs fn(replica) on every replica; returns when every one has returned.
  void run(const std::function<void(int replica)>& fn) {
    task_ = &fn;  // published to the workers by the barrier (release/acquire)
    barrier(0);
    fn(0);
    barrier(0);
  }

  // Every replica calls it, inside fn: returns once all have arrived.
  void barrier(int replica) { barrier_.arrive_and_wait(&senses_[replica].value, policy_, waiter_); }

 private:
  struct alignas(64) Sense {  // a cache line each: every replica writes its own
    bool value = false;
  };
  struct NeverCancelled : ShmBarrier::Waiter {
    bool cancelled() const override { return false; }
    void on_warn(double) override {}
    [[noreturn]] void on_abort(double) override { std::abort(); }
  };

  const int replicas_;
  ShmBarrier barrier_;
  std::vector<Sense> senses_;
  StallPolicy policy_;
  NeverCancelled waiter_;
  const std::function<void(int)>* task_ = nullptr;
  std::vector<std::thread> threads_;
};

}  // namespace fjit::bench
