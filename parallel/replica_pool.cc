#include "parallel/replica_pool.h"

#include "core/base/threads.h"
#include "parallel/stall_inspector.h"

namespace fjit {
namespace {

// Long enough to cover the caller's work between two steps (flag checks, the user's loop),
// short enough that an idle job gives its cores back within a fraction of a millisecond.
constexpr std::chrono::microseconds kSpinWindow{300};

std::chrono::nanoseconds spin_window_for(int replicas, int intra_op_threads) {
  const unsigned cores = std::thread::hardware_concurrency();
  if (replicas < 2 || cores == 0 || static_cast<unsigned>(replicas * intra_op_threads) > cores)
    return std::chrono::nanoseconds(0);
  return kSpinWindow;
}

}  // namespace

ReplicaPool::ReplicaPool(int replicas, int intra_op_threads)
    : size_(replicas),
      intra_op_threads_(intra_op_threads),
      spin_(spin_window_for(replicas, intra_op_threads)),
      errors_(replicas) {
  for (int r = 1; r < size_; ++r) threads_.emplace_back([this, r] { worker(r); });
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);  // ends the workers' spinning
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

template <class Pred>
bool ReplicaPool::spin_until(Pred pred) const {
  if (spin_.count() == 0) return pred();
  const auto deadline = std::chrono::steady_clock::now() + spin_;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return pred();
  }
}

void ReplicaPool::worker(int replica) {
  set_intra_op_threads(intra_op_threads_);
  uint64_t seen = 0;
  for (;;) {
    auto started = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(started)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, started);
    }
    seen = generation_.load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    try {
      (*task_)(replica);
    } catch (...) {
      errors_[replica] = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller checks pending_ under mu_ to sleep
      done_cv_.notify_one();
    }
  }
}

void ReplicaPool::run(const std::function<void(int)>& fn) {
  for (auto& e : errors_) e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &fn;
    pending_.store(size_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
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
  auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
  for (auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

}  // namespace fjit
