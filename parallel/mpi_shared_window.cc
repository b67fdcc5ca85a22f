// MpiCommunicator's shared-memory path (mpi_communicator.h): all_reduce and all_reduce_apply
// through an MPI-3 shared-memory window when every rank is on this machine.
//
// Ranks on one machine can load and store each other's window memory, so the reduce-scatter
// and all-gather rounds of an all-reduce become plain reads: per segment of the buffer,
//   1. each rank copies into its input area the chunks of its segment that the other ranks
//      reduce, or, when its source lies in its shared workspace (a gradient its plan wrote
//      there), publishes where it lies; the ranks meet (a barrier);
//   2. each rank reduces its chunk of the segment, reading every other rank's input (area
//      or workspace) and its own source, in rank order, into its own result area (and, for
//      all_reduce, straight into the caller's buffer); all_reduce_apply hands the chunk to
//      its callback at once (the update of the parameters, applied from cache); the ranks
//      meet again;
//   3. each rank takes the other ranks' reduced chunks where their owners put them:
//      all_reduce copies them into the caller's buffer, all_reduce_apply hands them to its
//      callback.
// Segments alternate between two sets of areas, so the barrier of a segment's step 1 also
// tells that every rank has finished step 3 of the segment two back, whose areas are reused.
// Before the second barrier, which every rank passes only when all have read their chunks, a
// rank writes (its reduced chunk, into all_reduce's buffer or through apply) only the range
// of its own chunk, which no other rank reads. Ranks need not agree on where their sources
// lie: plans of uneven shards lay out their workspaces differently, so each rank says where
// its own is.
// The sums are combine_in_rank_order's, as in the message path and the thread backend.
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "core/base/activity.h"
#include "core/base/config.h"
#include "core/base/log.h"
#include "core/base/metrics.h"
#include "parallel/collective_metrics.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"
#include "parallel/shm_barrier.h"

namespace fjit {
namespace {
constexpr int64_t kAreaBytes = static_cast<int64_t>(MpiCommunicator::kDefaultSegmentBytes);
// After each rank's four areas: rank 0's holds the ranks' barrier.
constexpr int64_t kControlBytes = 4096;
// Within each rank's control area, after rank 0's barrier: where the rank's source of the
// current segment lies, one slot per set: a byte offset into its shared workspace, or
// kCopied when it copied the segment into its input area.
constexpr int64_t kSourceAt = 2048;
constexpr int64_t kCopied = -1;
static_assert(sizeof(ShmBarrier) <= kSourceAt && kSourceAt + 2 * sizeof(int64_t) <= kControlBytes);

// Every rank's part of a shared window, 64-byte aligned: MPI does not align a rank's part,
// and the kernels reading it want cache lines (the offset within a page is the same in every
// process, so every rank rounds alike; parts are allocated 64 bytes larger for it).
std::vector<unsigned char*> aligned_parts(MPI_Win window, int size) {
  std::vector<unsigned char*> parts(static_cast<size_t>(size), nullptr);
  for (int r = 0; r < size; ++r) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* base = nullptr;
    MPI_Win_shared_query(window, r, &bytes, &unit, &base);
    const auto at = reinterpret_cast<uintptr_t>(base);
    parts[r] = reinterpret_cast<unsigned char*>((at + 63) & ~uintptr_t{63});
  }
  return parts;
}

// Where OpenMPI puts the backing files of shared windows (osc/sm's backing directory).
std::string backing_directory() {
  const std::optional<std::string> dir = config::ompi_backing_directory();
  return dir.has_value() && !dir->empty() ? *dir : "/dev/shm";
}

// Bytes free there; the largest int64 when that cannot be read.
int64_t backing_bytes_free() {
  struct statvfs st {};
  if (statvfs(backing_directory().c_str(), &st) != 0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

}  // namespace

bool MpiCommunicator::allocate_shared(int64_t bytes, MPI_Win* window,
                                      std::vector<unsigned char*>* parts) {
  void* mine = nullptr;
  if (MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes + 64), 1, MPI_INFO_NULL, comm_, &mine,
                              window) != MPI_SUCCESS) {
    *window = MPI_WIN_NULL;
    return false;
  }
  *parts = aligned_parts(*window, size_);
  return true;
}

bool MpiCommunicator::shared_memory_fits(int64_t bytes_per_rank, const char* what) {
  // The least any rank sees, so that all decide alike. A stall-inspected meeting too: the
  // window allocation that follows waits for every rank with no stall policy.
  long long room = std::min(backing_bytes_free(), shared_memory_budget_), least = 0;
  MPI_Request request;
  MPI_Iallreduce(&room, &least, 1, MPI_LONG_LONG, MPI_MIN, comm_, &request);
  wait(1, &request);
  const int64_t need = 2 * bytes_per_rank * size_;  // half of what is free, at most
  if (least >= need) return true;
  if (rank_ == 0) {
    log().warn("shared memory: {} has {} MiB free, and {} would take {} MiB of it "
               "({} ranks); doing without (raise the limit, e.g. docker run --shm-size)",
               backing_directory(), least >> 20, what, (need / 2) >> 20, size_);
  }
  return false;
}

// What a rank waiting at the window's barrier is told: the stall policy's messages, as wait()
// gives them to a rank waiting on messages.
class MpiCommunicator::WindowWaiter final : public ShmBarrier::Waiter {
 public:
  explicit WindowWaiter(MpiCommunicator& comm) : comm_(comm) {}
  bool cancelled() const override { return false; }
  void on_sleep() override { comm_.answer_roll_call(); }
  void on_warn(double waited) override { comm_.warn_stall(waited); }
  void on_abort(double waited) override { comm_.abort_stall(waited); }

 private:
  MpiCommunicator& comm_;
};

bool MpiCommunicator::shared_window() {
  if (!use_shared_memory_) return false;
  if (shared_state_ != 0) return shared_state_ > 0;
  shared_state_ = -1;
  // Every rank reaches the same answer (the group is one machine or it is not), so either
  // all allocate the window (a collective) or none does.
  if (local_size_ != size_ || size_ < 2) return false;
  // Short of room, OpenMPI aborts the job in MPI_Win_allocate_shared (a container's default
  // /dev/shm is 64 MiB): the message path does without.
  constexpr int64_t kWindowBytes = 4 * kAreaBytes + kControlBytes;
  if (!shared_memory_fits(kWindowBytes + 64, "the all-reduce window") ||
      !allocate_shared(kWindowBytes, &window_, &window_base_))
    return false;
  MPI_Win_lock_all(MPI_MODE_NOCHECK, window_);  // passive target: loads and stores, synced
  // The ranks meet in the window through a barrier of atomics, not an MPI barrier (whose
  // latency varied by a factor of 60 on a loaded VM, bench/RESULTS.md; two meetings per segment). Rank 0
  // builds it; MPI_Barrier publishes it. It is never destroyed: it dies with the window.
  unsigned char* control = window_base_[0] + 4 * kAreaBytes;
  if (rank_ == 0) new (control) ShmBarrier(size_, /*process_shared=*/true);
  MPI_Win_sync(window_);
  MPI_Barrier(comm_);
  MPI_Win_sync(window_);
  window_barrier_ = reinterpret_cast<ShmBarrier*>(control);
  shared_state_ = 1;
  return true;
}

void MpiCommunicator::reserve_shared_workspace(size_t bytes) {
  // Every rank decides alike: same bytes (REQUIRES), same reserved size, same window state.
  if (bytes <= workspace_bytes_ || bytes <= workspace_refused_ || size_ < 2 || !shared_window())
    return;
  if (!shared_memory_fits(static_cast<int64_t>(bytes) + 64, "the plans' workspaces")) {
    workspace_refused_ = bytes;  // plans keep memory of their own; sources are copied
    return;
  }
  if (workspace_window_ != MPI_WIN_NULL) MPI_Win_free(&workspace_window_);
  workspace_bytes_ = 0;
  if (allocate_shared(static_cast<int64_t>(bytes), &workspace_window_, &workspace_base_))
    workspace_bytes_ = bytes;
}

void* MpiCommunicator::shared_workspace(size_t bytes) {
  return workspace_bytes_ > 0 && bytes <= workspace_bytes_ ? workspace_base_[rank_] : nullptr;
}

void MpiCommunicator::all_reduce_apply(const void* src, void* scratch_buffer, int64_t count,
                                       DType dtype, void* ctx, ReducedBlockFn apply) {
  const bool floating = dtype == DType::f32 || dtype == DType::f64;
  if (!floating || size_ < 2 || count <= 0 || !shared_window()) {
    Communicator::all_reduce_apply(src, scratch_buffer, count, dtype, ctx, apply);
    return;
  }
  CollectiveRecord record(true, CollectiveKind::all_reduce, count * dtype_size(dtype));
  enter("all_reduce", count * dtype_size(dtype));
  metrics().allreduce_shared_window.fetch_add(1, std::memory_order_relaxed);
  window_reduce(src, count, dtype, ReduceOp::sum, ctx, apply);
}

void MpiCommunicator::window_reduce(const void* src, int64_t count, DType dtype, ReduceOp op,
                                    void* ctx, ReducedBlockFn apply, void* own_out) {
  const int64_t esize = dtype_size(dtype);
  const int64_t segment = kAreaBytes / esize;
  WindowWaiter waiter(*this);
  auto meet = [&] {
    MPI_Win_sync(window_);  // this rank's stores before the barrier, others' after it
    const WaitingInCollective waiting(rank_);  // for stall reports (core/base/activity.h)
    window_barrier_->arrive_and_wait(&window_sense_, policy_, waiter);
    MPI_Win_sync(window_);
  };
  const auto* in = static_cast<const unsigned char*>(src);
  const unsigned char* own = workspace_bytes_ > 0 ? workspace_base_[rank_] : nullptr;
  const bool in_place = own != nullptr && in >= own &&
                        in + count * esize <= own + static_cast<int64_t>(workspace_bytes_);
  auto source_slot = [&](int r, uint64_t parity) {
    return reinterpret_cast<int64_t*>(window_base_[r] + 4 * kAreaBytes + kSourceAt) + parity;
  };
  for (int64_t done = 0; done < count; done += segment) {
    const int64_t n = std::min(segment, count - done);
    const uint64_t parity = apply_segments_++ % 2;
    const int64_t set = static_cast<int64_t>(parity) * 2 * kAreaBytes;
    if (in_place) {
      *source_slot(rank_, parity) = (in - own) + done * esize;
      ++in_place_segments_;
    }
    for (int r = 0; r < size_; ++r) chunks_[r] = chunk_of(n, size_, r, static_cast<int>(esize));
    if (!in_place) {
      // Only the chunks the other ranks reduce: this rank alone reads its own chunk, from
      // the source itself.
      *source_slot(rank_, parity) = kCopied;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || chunks_[r].count == 0) continue;
        const int64_t at = chunks_[r].begin * esize;
        std::memcpy(window_base_[rank_] + set + at, in + done * esize + at, chunks_[r].count * esize);
      }
    }
    meet();
    for (int r = 0; r < size_; ++r) {
      const int64_t at = *source_slot(r, parity);
      inputs_[r] = r == rank_          ? in + done * esize
                   : at == kCopied     ? window_base_[r] + set
                                       : workspace_base_[r] + at;
    }
    const ElementRange mine = chunks_[rank_];
    unsigned char* result = window_base_[rank_] + set + kAreaBytes;
    void* outputs[2] = {result, own_out != nullptr ? static_cast<unsigned char*>(own_out) + done * esize : nullptr};
    combine_in_rank_order(inputs_.data(), size_, outputs, own_out != nullptr ? 2 : 1, mine.begin,
                          mine.count, dtype, op);
    // This rank's own chunk is final: apply it before meeting, while the others still reduce.
    if (own_out == nullptr && mine.count > 0)
      apply(ctx, done + mine.begin, mine.count, result + mine.begin * esize);
    meet();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || chunks_[r].count == 0) continue;
      const unsigned char* reduced = window_base_[r] + set + kAreaBytes + chunks_[r].begin * esize;
      apply(ctx, done + chunks_[r].begin, chunks_[r].count, reduced);
    }
  }
}

}  // namespace fjit
