#include "core/compile/collective_worker.h"

#include <cassert>

#include "core/base/metrics.h"
#include "core/base/timeline.h"

namespace fjit {

CollectiveWorker::CollectiveWorker(int track) : track_(track), thread_([this] { loop(); }) {}

CollectiveWorker::~CollectiveWorker() {
  drain();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

void CollectiveWorker::begin(int tasks) {
  std::lock_guard<std::mutex> lock(mu_);
  assert(finished_ == submitted_);
  if (static_cast<int>(tasks_.size()) < tasks) tasks_.resize(tasks);
  submitted_ = finished_ = 0;
  error_ = nullptr;
}

void CollectiveWorker::submit(const Instr& instr, const Frame& frame, bool recorded) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (submitted_ == static_cast<int>(tasks_.size())) tasks_.resize(tasks_.size() * 2 + 1);
    tasks_[submitted_] = Task{&instr, frame, recorded};
    ++submitted_;
  }
  work_cv_.notify_one();
}

void CollectiveWorker::wait(int ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return finished_ >= ticket || error_ != nullptr; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    // Whatever was queued behind the failed task still runs (or fails) before the run's
    // frame goes: the caller unwinds through drain().
    lock.unlock();
    std::rethrow_exception(e);
  }
}

void CollectiveWorker::drain() noexcept {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return finished_ == submitted_; });
  error_ = nullptr;
}

void CollectiveWorker::loop() {
  timeline::set_track(track_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || finished_ < submitted_; });
    if (finished_ == submitted_) return;  // stop_, with nothing left
    const Task task = tasks_[finished_];
    lock.unlock();
    std::exception_ptr failed;
    const int64_t t0 = task.recorded ? now_ns() : 0;
    try {
      task.instr->fn(*task.instr, task.frame);
    } catch (...) {
      failed = std::current_exception();
    }
    if (task.recorded) {
      const Instr& in = *task.instr;
      timeline::event(in.trace_name, "collective", t0, now_ns(),
                      in.out.size() * dtype_size(in.out.dtype));
    }
    lock.lock();
    if (failed && !error_) error_ = failed;
    ++finished_;
    done_cv_.notify_all();
  }
}

}  // namespace fjit
