#include "parallel/shm_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "checks/activity_report.h"
#include "core/base/activity.h"
#include "core/base/log.h"
#include "core/trace/thread_stacks.h"
#include "parallel/collective_metrics.h"
#include "parallel/communicator_reduce.h"

namespace fjit {

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(ShmGroup* group, int rank)
      : group_(group),
        rank_(rank),
        ptrs_(static_cast<size_t>(group->size_)),
        srcs_(static_cast<size_t>(group->size_)) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size_; }
  std::string backend() const override { return "threads"; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    CollectiveRecord record(rank_ == 0, CollectiveKind::all_reduce,
                            count > 0 ? count * dtype_size(dtype) : 0);
    enter("all_reduce", count > 0 ? count * dtype_size(dtype) : 0);
    const int n = group_->size_;
    if (count <= 0) return;
    if (n == 1) {
      if (single_contribution_changes(dtype, op)) {
        combine_in_rank_order(&data, 1, &data, 1, 0, count, dtype, op);
      }
      return;
    }
    me().data = data;
    group_->arrive_and_wait(rank_);
    for (int r = 0; r < n; ++r) ptrs_[r] = group_->slots_[r].data;
    // Each replica owns one chunk of the elements: it reads that chunk from every buffer and
    // writes the result into every buffer, so one pass does both reduce and copy-back.
    const ElementRange mine = chunk_of(count, n, rank_, dtype_size(dtype));
    combine_in_rank_order(ptrs_.data(), n, ptrs_.data(), n, mine.begin, mine.count, dtype, op);
    // No replica may return (and touch its buffer) while others still write into it.
    group_->arrive_and_wait(rank_);
  }

  // Each replica reduces its chunk block by block into a small buffer on its stack and applies
  // every block for every replica: one pass, no reduced gradient written anywhere.
  void all_reduce_apply(const void* src, void* scratch, int64_t count, DType dtype, void* ctx,
                        ReducedBlockFn apply) override {
    if (dtype != DType::f32 && dtype != DType::f64) {
      Communicator::all_reduce_apply(src, scratch, count, dtype, ctx, apply);
      return;
    }
    CollectiveRecord record(rank_ == 0, CollectiveKind::all_reduce,
                            count > 0 ? count * dtype_size(dtype) : 0);
    enter("all_reduce", count > 0 ? count * dtype_size(dtype) : 0);
    const int n = group_->size_;
    if (count <= 0) return;
    if (n == 1) {
      apply(ctx, 0, count, src);  // a sum of one contribution
      return;
    }
    me().send = src;
    me().apply_ctx = ctx;
    group_->arrive_and_wait(rank_);
    const int64_t esize = dtype_size(dtype);
    const ElementRange mine = chunk_of(count, n, rank_, static_cast<int>(esize));
    constexpr int64_t kBlockBytes = 8 << 10;
    alignas(64) std::byte block[kBlockBytes];
    void* out[1] = {block};
    for (int64_t b = mine.begin; b < mine.begin + mine.count; b += kBlockBytes / esize) {
      const int64_t len = std::min(kBlockBytes / esize, mine.begin + mine.count - b);
      for (int r = 0; r < n; ++r)
        srcs_[r] = static_cast<const std::byte*>(group_->slots_[r].send) + b * esize;
      combine_in_rank_order(srcs_.data(), n, out, 1, 0, len, dtype, ReduceOp::sum);
      for (int r = 0; r < n; ++r) apply(group_->slots_[r].apply_ctx, b, len, block);
    }
    // No replica may return (and reuse its buffers) while others still read or write them.
    group_->arrive_and_wait(rank_);
  }

  void broadcast(void* data, size_t nbytes, int root) override {
    CollectiveRecord record(rank_ == 0, CollectiveKind::other, static_cast<int64_t>(nbytes));
    enter("broadcast", nbytes);
    check_root(root);
    if (nbytes == 0 || group_->size_ == 1) return;
    me().data = data;
    group_->arrive_and_wait(rank_);
    const void* src = group_->slots_[root].data;
    if (rank_ != root && src != data) std::memcpy(data, src, nbytes);
    group_->arrive_and_wait(rank_);
  }

  void all_gather(const void* send, void* recv, size_t nbytes_per_rank) override {
    CollectiveRecord record(rank_ == 0, CollectiveKind::other,
                            static_cast<int64_t>(nbytes_per_rank));
    enter("all_gather", nbytes_per_rank);
    if (nbytes_per_rank == 0) return;
    auto* out = static_cast<unsigned char*>(recv);
    const int n = group_->size_;
    if (n == 1) {
      if (send != recv) std::memmove(out, send, nbytes_per_rank);
      return;
    }
    me().send = send;
    group_->arrive_and_wait(rank_);
    for (int r = 0; r < n; ++r) {
      const void* src = group_->slots_[r].send;
      void* dst = out + static_cast<size_t>(r) * nbytes_per_rank;
      if (src != dst) std::memcpy(dst, src, nbytes_per_rank);
    }
    group_->arrive_and_wait(rank_);
  }

  // Each replica reads its block from every replica's send buffer and combines it in rank
  // order, as all_reduce combines its chunk: the same bits, a 1/n share of the reads.
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    const int64_t esize = dtype_size(dtype);
    CollectiveRecord record(rank_ == 0, CollectiveKind::other, count > 0 ? count * esize : 0);
    enter("reduce_scatter", count > 0 ? count * esize : 0);
    const int n = group_->size_;
    if (count <= 0) return;
    me().send = send;
    if (n > 1) group_->arrive_and_wait(rank_);
    for (int r = 0; r < n; ++r)
      srcs_[r] = static_cast<const std::byte*>(group_->slots_[r].send) + rank_ * count * esize;
    void* out[1] = {recv};
    combine_in_rank_order(srcs_.data(), n, out, 1, 0, count, dtype, op);
    if (n > 1) group_->arrive_and_wait(rank_);
  }

  void all_to_all(const void* send, void* recv, size_t nbytes_per_rank) override {
    CollectiveRecord record(rank_ == 0, CollectiveKind::other, static_cast<int64_t>(nbytes_per_rank));
    enter("all_to_all", nbytes_per_rank);
    if (nbytes_per_rank == 0) return;
    const int n = group_->size_;
    me().send = send;
    if (n > 1) group_->arrive_and_wait(rank_);
    for (int r = 0; r < n; ++r)
      std::memcpy(static_cast<unsigned char*>(recv) + static_cast<size_t>(r) * nbytes_per_rank,
                  static_cast<const unsigned char*>(group_->slots_[r].send) + static_cast<size_t>(rank_) * nbytes_per_rank,
                  nbytes_per_rank);
    if (n > 1) group_->arrive_and_wait(rank_);
  }

  void permute(const void* send, void* recv, size_t nbytes, int send_to, int recv_from) override {
    (void)send_to;
    CollectiveRecord record(rank_ == 0, CollectiveKind::other, static_cast<int64_t>(nbytes));
    enter("ppermute", nbytes);
    if (nbytes == 0) return;
    const int n = group_->size_;
    me().send = send;
    if (n > 1) group_->arrive_and_wait(rank_);
    if (recv_from < 0) std::memset(recv, 0, nbytes);
    else std::memcpy(recv, group_->slots_[recv_from].send, nbytes);
    if (n > 1) group_->arrive_and_wait(rank_);
  }

  void barrier() override {
    CollectiveRecord record(rank_ == 0, CollectiveKind::other, 0);
    enter("barrier", 0);
    if (group_->size_ > 1) group_->arrive_and_wait(rank_);
  }

  [[noreturn]] void abort_job(const std::string& message) override {
    group_->abort_job(rank_, message);
  }

 private:
  ShmGroup::Slot& me() { return group_->slots_[rank_]; }

  // Records which collective this replica is in, for the stall reports of the others.
  void enter(const char* name, uint64_t bytes) {
    me().collective.store(name, std::memory_order_relaxed);
    const uint64_t seq = me().calls.fetch_add(1, std::memory_order_relaxed) + 1;
    enter_collective(rank_, name, seq, bytes);
    if (group_->cancelled()) group_->throw_cancelled(rank_);
  }

  void check_root(int root) {
    if (root < 0 || root >= group_->size_) {
      abort_job(fmt::format("broadcast root {} is not a rank of a group of {}", root,
                            group_->size_));
    }
  }

  ShmGroup* group_;
  const int rank_;
  std::vector<void*> ptrs_;        // scratch for the all-reduce, sized once
  std::vector<const void*> srcs_;  // the same for all_reduce_apply
};

ShmGroup::ShmGroup(int size, StallPolicy policy)
    : size_(size), policy_(policy), slots_(new Slot[size > 0 ? size : 1]), barrier_(size) {
  if (size < 1) abort_job(0, fmt::format("ShmGroup needs at least one replica, got {}", size));
}

ShmGroup::~ShmGroup() = default;

std::unique_ptr<Communicator> ShmGroup::communicator(int rank) {
  if (rank < 0 || rank >= size_) {
    abort_job(0, fmt::format("communicator({}) asked of a group of {}", rank, size_));
  }
  return std::make_unique<ShmCommunicator>(this, rank);
}

class ShmGroup::StallReporter final : public ShmBarrier::Waiter {
 public:
  StallReporter(const ShmGroup& group, int rank) : group_(group), rank_(rank) {}
  bool cancelled() const override { return group_.cancelled(); }
  void on_warn(double waited) override { log().warn("{}", group_.describe_stall(rank_, waited)); }
  [[noreturn]] void on_abort(double waited) override {
    group_.abort_job(rank_, group_.describe_stall(rank_, waited));
  }

 private:
  const ShmGroup& group_;
  const int rank_;
};

void ShmGroup::arrive_and_wait(int rank) {
  Slot& me = slots_[rank];
  me.arrivals.fetch_add(1, std::memory_order_relaxed);
  if (cancelled()) throw_cancelled(rank);
  StallReporter reporter(*this, rank);
  const WaitingInCollective waiting(rank);
  if (!barrier_.arrive_and_wait(&me.local_sense, policy_, reporter)) throw_cancelled(rank);
}

void ShmGroup::throw_cancelled(int rank) const {
  const Slot& me = slots_[rank];
  MutexLock lock(&mu_);
  throw CollectiveCancelled(fmt::format("replica {}: {} #{} cancelled: {}", rank,
                                        me.collective.load(), me.calls.load(), cancel_reason_));
}

std::string ShmGroup::describe_stall(int rank, double waited_seconds) const {
  const Slot& me = slots_[rank];
  const uint64_t mine = me.arrivals.load(std::memory_order_relaxed);
  std::string missing;
  for (int r = 0; r < size_; ++r) {
    const Slot& s = slots_[r];
    if (s.arrivals.load(std::memory_order_relaxed) >= mine) continue;
    if (!missing.empty()) missing += ", ";
    missing += fmt::format("replica {} (last entered {} #{})", r, s.collective.load(),
                           s.calls.load(std::memory_order_relaxed));
  }
  if (missing.empty()) missing = "none (all arrived; the barrier is being released)";
  std::string doing;
  for (int r = 0; r < size_; ++r) {
    std::string lines = describe_replica_activity(r);
    for (size_t at = lines.find('\n'); at != std::string::npos; at = lines.find('\n', at + 1))
      lines.replace(at, 1, "\n    ");
    doing += fmt::format("\n  replica {}: {}", r, lines);
  }
  return fmt::format("stall: replica {} of {} (threads) has waited {:.2f} s in {} #{}; "
                     "not arrived: {}\nwhat each replica is doing:{}\nhost stacks (pid {}):\n{}",
                     rank, size_, waited_seconds, me.collective.load(),
                     me.calls.load(std::memory_order_relaxed), missing, doing, static_cast<long>(::getpid()),
                     all_thread_stacks());
}

void ShmGroup::abort_job(int rank, const std::string& message) const {
  log().critical("aborting the job (replica {} of {}, threads): {}", rank, size_, message);
  log().flush();
  std::abort();
}

void ShmGroup::cancel(int rank, const std::string& reason) {
  {
    MutexLock lock(&mu_);
    if (cancelled_.load(std::memory_order_relaxed)) return;
    cancel_reason_ = fmt::format("replica {} failed: {}", rank, reason);
    cancelled_.store(true, std::memory_order_release);
  }
  barrier_.wake_all();
}

void ShmGroup::run(const std::function<void(Communicator&)>& fn) {
  // Each replica records its own outcome (joining publishes it); the order of failures
  // tells the cause (first to fail) from the cancellations it triggered.
  struct Outcome {
    std::exception_ptr error;
    int order = -1;
    bool cancelled = false;
  };
  std::vector<Outcome> outcomes(static_cast<size_t>(size_));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    threads.emplace_back([&, r] {
      Outcome& out = outcomes[r];
      try {
        std::unique_ptr<Communicator> comm = communicator(r);
        fn(*comm);
      } catch (const CollectiveCancelled&) {
        out.error = std::current_exception();
        out.order = failures.fetch_add(1);
        out.cancelled = true;
      } catch (...) {
        out.error = std::current_exception();
        out.order = failures.fetch_add(1);
        std::string what = "unknown exception";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        cancel(r, what);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const Outcome* first = nullptr;
  for (const Outcome& o : outcomes) {
    if (!o.error) continue;
    // A real failure beats any cancellation; among equals the earliest wins.
    if (first == nullptr || (first->cancelled && !o.cancelled) ||
        (first->cancelled == o.cancelled && o.order < first->order)) {
      first = &o;
    }
  }
  if (first != nullptr) std::rethrow_exception(first->error);
}

}  // namespace fjit
