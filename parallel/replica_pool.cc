#include "parallel/replica_pool.h"

#include "core/threads.h"

namespace fjit {

ReplicaPool::ReplicaPool(int replicas, int intra_op_threads)
    : size_(replicas), intra_op_threads_(intra_op_threads), errors_(replicas) {
  for (int r = 1; r < size_; ++r) threads_.emplace_back([this, r] { worker(r); });
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::worker(int replica) {
  set_intra_op_threads(intra_op_threads_);
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    try {
      (*task)(replica);
    } catch (...) {
      errors_[replica] = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

void ReplicaPool::run(const std::function<void(int)>& fn) {
  for (auto& e : errors_) e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &fn;
    pending_ = size_ - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  const int callers_threads = fjit::intra_op_threads();
  set_intra_op_threads(intra_op_threads_);
  try {
    fn(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  set_intra_op_threads(callers_threads);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
  }
  for (auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

}  // namespace fjit
