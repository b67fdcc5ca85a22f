// ReplicaPool: N long-lived threads that run one function per replica per step, so a step
// costs a wake-up, not a thread start. Replica 0 runs on the calling thread.
//
// Each replica runs its kernels with `intra_op_threads` threads (core/base/threads.h): the workers
// set it once, and the caller's own setting is swapped in for replica 0 only while it runs.
//
// run() returns when every replica has finished; if any replica threw, the first exception
// (by replica index) is rethrown on the caller after all have finished.
//
// Waking a sleeping thread costs tens to a hundred microseconds on a virtual machine, and in a
// data-parallel step every replica then waits for the late one at the first collective. So a
// worker that has finished a step spins for the next one for a short while (spin_window)
// before it sleeps, and the caller spins for the workers to finish, as OpenMP runtimes do
// between parallel regions (their "block time"). Spinning is off when the replicas and their
// intra-op threads outnumber the cores: a spinning thread would then take a core from one
// that has work.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fjit {

class ReplicaPool {
 public:
  // REQUIRES: replicas >= 1, intra_op_threads >= 1.
  ReplicaPool(int replicas, int intra_op_threads);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int size() const { return size_; }
  int intra_op_threads() const { return intra_op_threads_; }
  void run(const std::function<void(int replica)>& fn);
  // How long an idle thread spins before it sleeps (zero when the pool oversubscribes cores).
  std::chrono::nanoseconds spin_window() const { return spin_; }

 private:
  void worker(int replica);
  // Spins until pred() holds or the spin window passes; returns pred().
  template <class Pred>
  bool spin_until(Pred pred) const;

  const int size_;
  const int intra_op_threads_;
  const std::chrono::nanoseconds spin_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  // Published by run() before generation_ is incremented (release), read after (acquire).
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // written under mu_, so sleepers cannot miss it
  std::atomic<int> pending_{0};          // workers still running this step
  bool stop_ = false;                    // guarded by mu_
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace fjit
