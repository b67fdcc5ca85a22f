// MpiCommunicator::all_reduce_apply through an MPI-3 shared-memory window (mpi_communicator.h).
//
// Ranks on one machine can load and store each other's window memory, so the reduce-scatter
// and all-gather rounds of all_reduce become plain reads: per segment of the buffer,
//   1. each rank copies its segment into its input area and the ranks meet (a barrier);
//   2. each rank reduces its chunk of the segment, reading every rank's input area in rank
//      order, into its own result area, and the ranks meet again;
//   3. each rank applies the whole reduced segment, reading the chunks where their owners
//      put them.
// Segments alternate between two sets of areas, so the barrier of a segment's step 1 also
// tells that every rank has finished step 3 of the segment two back, whose areas are reused.
// The sums are combine_in_rank_order's, as in all_reduce and the thread backend.
#include <algorithm>
#include <cstring>

#include "parallel/collective_metrics.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"

namespace fjit {
namespace {
constexpr int64_t kAreaBytes = static_cast<int64_t>(MpiCommunicator::kDefaultSegmentBytes);
}  // namespace

bool MpiCommunicator::shared_window() {
  if (shared_state_ != 0) return shared_state_ > 0;
  shared_state_ = -1;
  // Every rank reaches the same answer (the group is one machine or it is not), so either
  // all allocate the window (a collective) or none does.
  if (local_size_ != size_ || size_ < 2) return false;
  void* mine = nullptr;
  if (MPI_Win_allocate_shared(4 * kAreaBytes, 64, MPI_INFO_NULL, comm_, &mine, &window_) !=
      MPI_SUCCESS)
    return false;
  window_base_.assign(static_cast<size_t>(size_), nullptr);
  for (int r = 0; r < size_; ++r) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* base = nullptr;
    MPI_Win_shared_query(window_, r, &bytes, &unit, &base);
    window_base_[r] = static_cast<unsigned char*>(base);
  }
  MPI_Win_lock_all(MPI_MODE_NOCHECK, window_);  // passive target: loads and stores, synced
  shared_state_ = 1;
  return true;
}

void MpiCommunicator::all_reduce_apply(const void* src, void* scratch_buffer, int64_t count,
                                       DType dtype, void* ctx, ReducedBlockFn apply) {
  const bool floating = dtype == DType::f32 || dtype == DType::f64;
  if (!floating || size_ < 2 || count <= 0 || !shared_window()) {
    Communicator::all_reduce_apply(src, scratch_buffer, count, dtype, ctx, apply);
    return;
  }
  CollectiveRecord record(true, CollectiveKind::all_reduce, count * dtype_size(dtype));
  enter("all_reduce");
  const int64_t esize = dtype_size(dtype);
  const int64_t segment = kAreaBytes / esize;
  auto meet = [&] {
    MPI_Win_sync(window_);  // this rank's stores before the barrier, others' after it
    MPI_Request request;
    MPI_Ibarrier(comm_, &request);
    wait(1, &request);
    MPI_Win_sync(window_);
  };
  const auto* in = static_cast<const unsigned char*>(src);
  for (int64_t done = 0; done < count; done += segment) {
    const int64_t n = std::min(segment, count - done);
    const int64_t set = static_cast<int64_t>(apply_segments_++ % 2) * 2 * kAreaBytes;
    std::memcpy(window_base_[rank_] + set, in + done * esize, n * esize);
    meet();
    for (int r = 0; r < size_; ++r) {
      chunks_[r] = chunk_of(n, size_, r, static_cast<int>(esize));
      inputs_[r] = window_base_[r] + set;
    }
    void* result = window_base_[rank_] + set + kAreaBytes;
    combine_in_rank_order(inputs_.data(), size_, &result, 1, chunks_[rank_].begin,
                          chunks_[rank_].count, dtype, ReduceOp::sum);
    meet();
    for (int r = 0; r < size_; ++r) {
      if (chunks_[r].count == 0) continue;
      const unsigned char* reduced = window_base_[r] + set + kAreaBytes + chunks_[r].begin * esize;
      apply(ctx, done + chunks_[r].begin, chunks_[r].count, reduced);
    }
  }
}

}  // namespace fjit
