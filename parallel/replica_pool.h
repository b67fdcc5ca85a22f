// ReplicaPool: N long-lived threads that run one function per replica per step, so a step
// costs a wake-up, not a thread start. Replica 0 runs on the calling thread.
//
// Each replica runs its kernels with `intra_op_threads` threads (core/threads.h): the workers
// set it once, and the caller's own setting is swapped in for replica 0 only while it runs.
//
// run() returns when every replica has finished; if any replica threw, the first exception
// (by replica index) is rethrown on the caller after all have finished.
#pragma once

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

 private:
  void worker(int replica);

  const int size_;
  const int intra_op_threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* task_ = nullptr;  // guarded by mu_
  uint64_t generation_ = 0;                         // guarded by mu_
  int pending_ = 0;                                 // guarded by mu_
  bool stop_ = false;                               // guarded by mu_
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace fjit
