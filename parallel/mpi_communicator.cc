#include "parallel/mpi_communicator.h"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "core/log.h"
#include "parallel/communicator_reduce.h"
#include "parallel/mpi_runtime.h"
#include "parallel/stall_inspector.h"

namespace fjit {
namespace {

// At or below this many bytes per rank one all-gather of whole buffers beats the two rounds
// of reduce-scatter + all-gather (latency dominates; measured with bench/allreduce_bench).
constexpr size_t kSmallAllReduceBytes = 16 * 1024;
// MPI counts and displacements are ints: larger buffers are reduced in segments.
constexpr int64_t kMaxSegmentElements = int64_t{1} << 30;
constexpr size_t kMaxBroadcastBytes = size_t{1} << 30;
// A polling waiter that has gone to sleep checks back this often.
constexpr auto kLongestSleep = std::chrono::microseconds(200);

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::boolean: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, StallPolicy policy) : policy_(policy) {
  mpi_init_once();
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm local;
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_size = 1;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  pacing_ = pacing_for(local_size);
  for (auto* v : {&send_counts_, &send_displs_, &recv_counts_, &recv_displs_}) {
    v->assign(static_cast<size_t>(size_), 0);
  }
  inputs_.assign(static_cast<size_t>(size_), nullptr);
}

MpiCommunicator::~MpiCommunicator() {
  // Freeing after MPI_Finalize is an error; at that point the handle is dead anyway.
  if (comm_ != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&comm_);
}

void MpiCommunicator::enter(const char* name) {
  collective_ = name;
  ++calls_;
}

unsigned char* MpiCommunicator::scratch(size_t nbytes) {
  if (scratch_.size() < nbytes) scratch_.resize(nbytes);
  return scratch_.data();
}

void MpiCommunicator::wait(MPI_Request* request) {
  int done = 0;
  MPI_Test(request, &done, MPI_STATUS_IGNORE);
  if (done) return;
  StallTimer timer(policy_, pacing_);
  for (;;) {
    switch (timer.next()) {
      case StallTimer::Step::spin:
        break;  // MPI_Test itself is the pause, and it drives the progress engine
      case StallTimer::Step::yield:
        sched_yield();
        break;
      case StallTimer::Step::sleep:
        std::this_thread::sleep_for(timer.sleep_slice(kLongestSleep));
        break;
      case StallTimer::Step::warn:
        log().warn("stall: rank {} of {} (mpi) has waited {:.2f} s in {} #{}; at least one "
                   "rank has not arrived",
                   rank_, size_, timer.waited_seconds(), collective_, calls_);
        break;
      case StallTimer::Step::abort:
        abort_job(fmt::format("stall: rank {} waited {:.2f} s in {} #{} (abort_after {} ms)",
                              rank_, timer.waited_seconds(), collective_, calls_,
                              policy_.abort_after.count()));
    }
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return;
  }
}

void MpiCommunicator::all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) {
  enter("all_reduce");
  if (count <= 0) return;
  if (size_ == 1) {
    if (single_contribution_changes(dtype, op)) {
      combine_in_rank_order(&data, 1, &data, 1, 0, count, dtype, op);
    }
    return;
  }
  auto* bytes = static_cast<unsigned char*>(data);
  const int64_t esize = dtype_size(dtype);
  for (int64_t done = 0; done < count; done += kMaxSegmentElements) {
    const int64_t n = std::min(kMaxSegmentElements, count - done);
    all_reduce_segment(bytes + done * esize, static_cast<int>(n), dtype, op);
  }
}

void MpiCommunicator::all_reduce_segment(unsigned char* data, int count, DType dtype,
                                         ReduceOp op) {
  const MPI_Datatype type = mpi_type(dtype);
  const size_t esize = static_cast<size_t>(dtype_size(dtype));
  const size_t nbytes = static_cast<size_t>(count) * esize;
  MPI_Request request;
  void* out = data;

  if (nbytes <= kSmallAllReduceBytes) {
    unsigned char* rows = scratch(nbytes * static_cast<size_t>(size_));
    MPI_Iallgather(data, count, type, rows, count, type, comm_, &request);
    wait(&request);
    for (int r = 0; r < size_; ++r) inputs_[r] = rows + static_cast<size_t>(r) * nbytes;
    combine_in_rank_order(inputs_.data(), size_, &out, 1, 0, count, dtype, op);
    return;
  }

  // Reduce-scatter: rank r receives every rank's chunk r (its own stays where it is).
  const ElementRange mine = chunk_of(count, size_, rank_, static_cast<int>(esize));
  for (int r = 0; r < size_; ++r) {
    const ElementRange theirs = chunk_of(count, size_, r, static_cast<int>(esize));
    send_counts_[r] = r == rank_ ? 0 : static_cast<int>(theirs.count);
    send_displs_[r] = static_cast<int>(theirs.begin);
    recv_counts_[r] = r == rank_ ? 0 : static_cast<int>(mine.count);
    recv_displs_[r] = static_cast<int>(mine.count) * r;
  }
  unsigned char* chunks = scratch(static_cast<size_t>(mine.count) * esize * size_);
  MPI_Ialltoallv(data, send_counts_.data(), send_displs_.data(), type, chunks,
                 recv_counts_.data(), recv_displs_.data(), type, comm_, &request);
  wait(&request);
  unsigned char* my_chunk = data + static_cast<size_t>(mine.begin) * esize;
  for (int r = 0; r < size_; ++r) {
    inputs_[r] = r == rank_ ? my_chunk : chunks + static_cast<size_t>(recv_displs_[r]) * esize;
  }
  out = my_chunk;
  combine_in_rank_order(inputs_.data(), size_, &out, 1, 0, mine.count, dtype, op);

  // All-gather the reduced chunks straight into the caller's buffer.
  for (int r = 0; r < size_; ++r) {
    const ElementRange theirs = chunk_of(count, size_, r, static_cast<int>(esize));
    recv_counts_[r] = static_cast<int>(theirs.count);
    recv_displs_[r] = static_cast<int>(theirs.begin);
  }
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, recv_counts_.data(),
                  recv_displs_.data(), type, comm_, &request);
  wait(&request);
}

void MpiCommunicator::broadcast(void* data, size_t nbytes, int root) {
  enter("broadcast");
  if (root < 0 || root >= size_) {
    abort_job(fmt::format("broadcast root {} is not a rank of a group of {}", root, size_));
  }
  auto* bytes = static_cast<unsigned char*>(data);
  for (size_t done = 0; done < nbytes; done += kMaxBroadcastBytes) {
    const size_t n = std::min(kMaxBroadcastBytes, nbytes - done);
    MPI_Request request;
    MPI_Ibcast(bytes + done, static_cast<int>(n), MPI_BYTE, root, comm_, &request);
    wait(&request);
  }
}

void MpiCommunicator::all_gather(const void* send, void* recv, size_t nbytes_per_rank) {
  enter("all_gather");
  if (nbytes_per_rank == 0) return;
  if (nbytes_per_rank > static_cast<size_t>(INT_MAX)) {
    abort_job(fmt::format("all_gather of {} bytes per rank exceeds the 2 GiB limit",
                          nbytes_per_rank));
  }
  const int n = static_cast<int>(nbytes_per_rank);
  auto* out = static_cast<unsigned char*>(recv);
  // MPI forbids the send block aliasing the receive buffer unless it is passed in place.
  const void* in = send == out + static_cast<size_t>(rank_) * nbytes_per_rank ? MPI_IN_PLACE : send;
  MPI_Request request;
  MPI_Iallgather(in, n, MPI_BYTE, recv, n, MPI_BYTE, comm_, &request);
  wait(&request);
}

void MpiCommunicator::barrier() {
  enter("barrier");
  MPI_Request request;
  MPI_Ibarrier(comm_, &request);
  wait(&request);
}

void MpiCommunicator::abort_job(const std::string& message) {
  log().critical("aborting the job (rank {} of {}, mpi): {}", rank_, size_, message);
  log().flush();
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this is for the compiler and for broken MPIs
}

}  // namespace fjit
