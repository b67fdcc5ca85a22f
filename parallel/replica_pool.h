// ReplicaPool: N long-lived threads that run one function per replica per step, so a step
// costs a wake-up, not a thread start. Replica 0 runs on the calling thread.
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
  explicit ReplicaPool(int replicas);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int size() const { return size_; }
  void run(const std::function<void(int replica)>& fn);

 private:
  void worker(int replica);

  const int size_;
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
