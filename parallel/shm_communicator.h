// Shared-memory backend: N replicas that are threads of one process.
//
// A ShmGroup of N owns the shared state; communicator(r) is replica r's handle. Collectives
// publish buffer pointers, meet at a barrier, and each replica then works on its own slice
// of the data directly in the other replicas' buffers (no copies through a staging area, no
// allocation per call). All-reduce sums each element in rank order 0..N-1, exactly as the
// MPI backend does (see communicator_reduce.h), so results are bitwise identical.
//
// Failure model: a replica that never arrives is logged after StallPolicy::warn_after and the
// process aborts after abort_after. A replica that throws inside ShmGroup::run cancels the
// group: every replica waiting (now or later) in a collective of that group throws
// CollectiveCancelled, so nothing hangs, and run() rethrows the original exception.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "absl/base/thread_annotations.h"
#include "core/kernels/collective/communicator.h"
#include "core/base/mutex.h"
#include "parallel/shm_barrier.h"

namespace fjit {

// Thrown from a collective of a cancelled ShmGroup.
class CollectiveCancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ShmGroup {
 public:
  // REQUIRES: size >= 1.
  explicit ShmGroup(int size, StallPolicy policy = StallPolicy::from_environment());
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;
  ~ShmGroup();

  int size() const { return size_; }
  const StallPolicy& policy() const { return policy_; }

  // Replica `rank`'s communicator. At most one may be alive per rank at a time, used by one
  // thread at a time; the group must outlive it. Cheap (no shared state is created).
  std::unique_ptr<Communicator> communicator(int rank);

  // Runs fn on size() new threads, one per rank, and joins them all. If any replica throws,
  // the group is cancelled and the first exception thrown is rethrown here.
  void run(const std::function<void(Communicator&)>& fn);

  // Makes every current and future collective of this group throw CollectiveCancelled.
  // A cancelled group cannot be revived; make a new one.
  void cancel(int rank, const std::string& reason);
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  friend class ShmCommunicator;
  // Per-replica state. Pointers are written by their replica before a barrier and read by
  // the others after it; the barrier orders them. The atomics feed stall reports only.
  struct alignas(64) Slot {
    void* data = nullptr;
    const void* send = nullptr;
    void* apply_ctx = nullptr;  // all_reduce_apply
    bool local_sense = false;  // touched only by the slot's replica
    std::atomic<uint64_t> arrivals{0};
    std::atomic<uint64_t> calls{0};
    std::atomic<const char*> collective{"(none)"};
  };

  class StallReporter;  // ShmBarrier::Waiter for one replica, defined in the .cc

  // One barrier round for replica `rank`; throws CollectiveCancelled if the group is.
  void arrive_and_wait(int rank);
  [[noreturn]] void throw_cancelled(int rank) const;
  std::string describe_stall(int rank, double waited_seconds) const;
  [[noreturn]] void abort_job(int rank, const std::string& message) const;

  const int size_;
  const StallPolicy policy_;
  std::unique_ptr<Slot[]> slots_;
  ShmBarrier barrier_;
  std::atomic<bool> cancelled_{false};
  mutable Mutex mu_;
  std::string cancel_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fjit
