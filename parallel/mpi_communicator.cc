#include "parallel/mpi_communicator.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/base/activity.h"
#include "core/base/log.h"
#include "core/base/metrics.h"
#include "core/base/timeline.h"
#include "parallel/clock_sync.h"
#include "parallel/collective_metrics.h"
#include "parallel/communicator_reduce.h"
#include "parallel/mpi_runtime.h"
#include "parallel/stall_inspector.h"

namespace fjit {
namespace {

// Small all-reduces are latency: what counts is the number of message rounds and whether a
// message fits OpenMPI's shared-memory eager limit (4 KiB with its header; above it a message
// costs an extra handshake). One round of whole buffers wins while they are eager, or while
// even the chunks would not be (then two rounds cost two handshakes); the measurements are in
// bench/RESULTS.md ("Figures quoted by the sources"). Past 16 KiB bandwidth decides: chunks.
constexpr size_t kEagerBytes = 4000;
constexpr size_t kSmallAllReduceBytes = 16 * 1024;
// MPI counts are ints: larger buffers go in segments, one round of messages each.
constexpr int64_t kMaxSegmentElements = int64_t{1} << 30;
constexpr size_t kMaxMessageBytes = size_t{1} << 30;
// A polling waiter that has gone to sleep checks back this often.
constexpr auto kLongestSleep = std::chrono::microseconds(200);
// A roll call waits for answers a quarter of the stall's first limit, within these bounds:
// long enough for a sleeping waiter on a loaded machine to answer, short beside the limit.
constexpr auto kShortestGrace = std::chrono::milliseconds(500);
constexpr auto kLongestGrace = std::chrono::milliseconds(2000);
// Each kind of round has its own tag, so a fast rank's next round never matches a slow
// rank's current one (messages with equal source and tag also never overtake each other).
// (parallel/mpi_sharding.cc uses tags 5 to 7.)
enum Tag : int { kTagRows = 1, kTagScatter = 2, kTagGather = 3, kTagBlocks = 4 };

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::boolean: case DType::u8: return MPI_UINT8_T;
    case DType::u32: return MPI_UINT32_T;
    case DType::f16: case DType::bf16: return MPI_UINT16_T;  // moved, never combined
  }
  return MPI_DATATYPE_NULL;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, StallPolicy policy) : policy_(policy) {
  mpi_init_once();
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  serialized_ = mpi_serialized_threads();
  if (comm == MPI_COMM_WORLD) {
    timeline::set_process(rank_, size_);  // names this rank's file
    // One time base for the job's timeline files: a few round trips, so done always (the
    // timeline may be turned on later).
    timeline::set_clock_offset(estimate_clock_offset(comm_));
  }
  MPI_Comm local;
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  roll_call_ = std::make_unique<MpiRollCall>(comm_);
  owner_ = std::this_thread::get_id();
  if (comm == MPI_COMM_WORLD) set_activity_poll(&MpiCommunicator::poll_point, this);
  pacing_ = pacing_for(local_size_);
  requests_.assign(2 * static_cast<size_t>(size_), MPI_REQUEST_NULL);
  chunks_.assign(static_cast<size_t>(size_), ElementRange{});
  inputs_.assign(static_cast<size_t>(size_), nullptr);
}

MpiCommunicator::~MpiCommunicator() {
  set_activity_poll_if(&MpiCommunicator::poll_point, this);
  // Freeing after MPI_Finalize is an error; at that point the handles are dead anyway.
  if (window_ != MPI_WIN_NULL && mpi_active()) {
    MPI_Win_unlock_all(window_);
    MPI_Win_free(&window_);
  }
  if (workspace_window_ != MPI_WIN_NULL && mpi_active()) MPI_Win_free(&workspace_window_);
  if (comm_ != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&comm_);
}

void MpiCommunicator::enter(const char* name, uint64_t bytes) {
  collective_ = name;
  ++calls_;
  enter_collective(rank_, name, calls_, bytes);
}

void MpiCommunicator::poll_point(void* self) {
  auto* c = static_cast<MpiCommunicator*>(self);
  // MPI is called by the thread that made the communicator only (MPI_THREAD_FUNNELED), and
  // at most every few milliseconds.
  if (std::this_thread::get_id() != c->owner_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - c->last_poll_ < std::chrono::milliseconds(5)) return;
  c->last_poll_ = now;
  c->roll_call_->answer_busy(c->calls_);
}

unsigned char* MpiCommunicator::scratch(size_t nbytes) {
  if (scratch_.size() < nbytes) scratch_.resize(nbytes);
  return scratch_.data();
}

void MpiCommunicator::wait(int n, MPI_Request* requests) {
  int done = 0;
  MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
  if (done) return;
  const WaitingInCollective waiting(rank_);  // for stall reports (core/base/activity.h)
  const int64_t wait_start = timeline::enabled() ? now_ns() : -1;  // the timeline's "wait"
  StallTimer timer(policy_, pacing_);
  for (;;) {
    switch (timer.next()) {
      case StallTimer::Step::spin:
        break;  // MPI_Testall itself is the pause, and it drives the progress engine
      case StallTimer::Step::yield:
        sched_yield();
        break;
      case StallTimer::Step::sleep:
        answer_roll_call();
        std::this_thread::sleep_for(timer.sleep_slice(kLongestSleep));
        break;
      case StallTimer::Step::warn:
        warn_stall(timer.waited_seconds());
        break;
      case StallTimer::Step::abort:
        abort_stall(timer.waited_seconds());
    }
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
    if (done) break;
  }
  if (wait_start >= 0) timeline::event("wait for replicas", "wait", wait_start, now_ns());
}

std::chrono::milliseconds MpiCommunicator::roll_call_grace() const {
  const auto first = policy_.warn_after.count() > 0 ? policy_.warn_after : policy_.abort_after;
  return std::clamp<std::chrono::milliseconds>(
      first / 4, std::chrono::duration_cast<std::chrono::milliseconds>(kShortestGrace),
      std::chrono::duration_cast<std::chrono::milliseconds>(kLongestGrace));
}

void MpiCommunicator::warn_stall(double waited) {
  const std::string who = roll_call_->survey(collective_, calls_, roll_call_grace());
  log().warn("stall: rank {} of {} (mpi, on {}) has waited {:.2f} s in {} #{}; {}", rank_, size_,
             roll_call_->host(rank_), waited, collective_, calls_, who);
}

void MpiCommunicator::abort_stall(double waited) {
  const std::string who = roll_call_->survey(collective_, calls_, roll_call_grace(), true);
  abort_job(fmt::format("stall: rank {} (on {}) waited {:.2f} s in {} #{} (abort_after {} ms); {}",
                        rank_, roll_call_->host(rank_), waited, collective_, calls_,
                        policy_.abort_after.count(), who));
}

void MpiCommunicator::all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) {
  CollectiveRecord record(true, CollectiveKind::all_reduce,
                          count > 0 ? count * dtype_size(dtype) : 0);
  enter("all_reduce", count > 0 ? count * dtype_size(dtype) : 0);
  if (count <= 0) return;
  if (size_ == 1) {
    if (single_contribution_changes(dtype, op)) {
      combine_in_rank_order(&data, 1, &data, 1, 0, count, dtype, op);
    }
    return;
  }
  auto* bytes = static_cast<unsigned char*>(data);
  const int64_t esize = dtype_size(dtype);
  const bool window = shared_window();
  (window ? metrics().allreduce_shared_window : metrics().allreduce_messages)
      .fetch_add(1, std::memory_order_relaxed);
  if (window) {
    struct Into {
      unsigned char* data;
      int64_t esize;
    } into{bytes, esize};
    // This rank's chunks are reduced straight into data; the others' are copied in.
    window_reduce(data, count, dtype, op, &into,
                  [](void* ctx, int64_t begin, int64_t n, const void* values) {
                    const auto& to = *static_cast<const Into*>(ctx);
                    std::memcpy(to.data + begin * to.esize, values, n * to.esize);
                  },
                  data);
    return;
  }
  // Segments keep each round's data cache-resident (see the header); MPI counts are ints.
  int64_t segment = kMaxSegmentElements;
  if (segment_bytes_ > 0) {
    segment = std::clamp<int64_t>(static_cast<int64_t>(segment_bytes_) / esize, 1, kMaxSegmentElements);
  }
  for (int64_t done = 0; done < count; done += segment) {
    const int64_t n = std::min(segment, count - done);
    all_reduce_segment(bytes + done * esize, static_cast<int>(n), dtype, op);
  }
}

void MpiCommunicator::all_reduce_segment(unsigned char* data, int count, DType dtype,
                                         ReduceOp op) {
  const MPI_Datatype type = mpi_type(dtype);
  const int esize = dtype_size(dtype);
  const size_t nbytes = static_cast<size_t>(count) * esize;
  MPI_Request* req = requests_.data();
  int n_req = 0;
  void* out = data;

  const bool one_round = nbytes <= kEagerBytes ||
                         (nbytes <= kSmallAllReduceBytes && nbytes / size_ > kEagerBytes);
  if (one_round) {
    // Every rank's whole buffer to every rank; each reduces all rows itself.
    unsigned char* rows = scratch(nbytes * static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Irecv(rows + r * nbytes, count, type, r, kTagRows, comm_, &req[n_req++]);
      MPI_Isend(data, count, type, r, kTagRows, comm_, &req[n_req++]);
    }
    wait(n_req, req);
    for (int r = 0; r < size_; ++r) inputs_[r] = r == rank_ ? data : rows + r * nbytes;
    combine_in_rank_order(inputs_.data(), size_, &out, 1, 0, count, dtype, op);
    return;
  }

  // Reduce-scatter: rank r receives every rank's copy of chunk r (its own stays in place).
  for (int r = 0; r < size_; ++r) chunks_[r] = chunk_of(count, size_, r, esize);
  const ElementRange mine = chunks_[rank_];
  const size_t mine_bytes = static_cast<size_t>(mine.count) * esize;
  unsigned char* received = scratch(mine_bytes * static_cast<size_t>(size_));
  unsigned char* my_chunk = data + static_cast<size_t>(mine.begin) * esize;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Irecv(received + r * mine_bytes, static_cast<int>(mine.count), type, r, kTagScatter,
              comm_, &req[n_req++]);
    MPI_Isend(data + static_cast<size_t>(chunks_[r].begin) * esize,
              static_cast<int>(chunks_[r].count), type, r, kTagScatter, comm_, &req[n_req++]);
  }
  wait(n_req, req);
  for (int r = 0; r < size_; ++r) inputs_[r] = r == rank_ ? my_chunk : received + r * mine_bytes;
  out = my_chunk;
  combine_in_rank_order(inputs_.data(), size_, &out, 1, 0, mine.count, dtype, op);

  // All-gather: the reduced chunks straight into every rank's buffer.
  n_req = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Irecv(data + static_cast<size_t>(chunks_[r].begin) * esize,
              static_cast<int>(chunks_[r].count), type, r, kTagGather, comm_, &req[n_req++]);
    MPI_Isend(my_chunk, static_cast<int>(mine.count), type, r, kTagGather, comm_,
              &req[n_req++]);
  }
  wait(n_req, req);
}

void MpiCommunicator::broadcast(void* data, size_t nbytes, int root) {
  CollectiveRecord record(true, CollectiveKind::other, static_cast<int64_t>(nbytes));
  enter("broadcast", nbytes);
  if (root < 0 || root >= size_) {
    abort_job(fmt::format("broadcast root {} is not a rank of a group of {}", root, size_));
  }
  // Rare and off the step's hot path (parameters at start-up): MPI's tree is fine here.
  auto* bytes = static_cast<unsigned char*>(data);
  for (size_t done = 0; done < nbytes; done += kMaxMessageBytes) {
    const size_t n = std::min(kMaxMessageBytes, nbytes - done);
    MPI_Request request;
    MPI_Ibcast(bytes + done, static_cast<int>(n), MPI_BYTE, root, comm_, &request);
    wait(1, &request);
  }
}

void MpiCommunicator::all_gather(const void* send, void* recv, size_t nbytes_per_rank) {
  CollectiveRecord record(true, CollectiveKind::other, static_cast<int64_t>(nbytes_per_rank));
  enter("all_gather", nbytes_per_rank);
  auto* out = static_cast<unsigned char*>(recv);
  const auto* in = static_cast<const unsigned char*>(send);
  unsigned char* mine = out + static_cast<size_t>(rank_) * nbytes_per_rank;
  if (nbytes_per_rank > 0 && in != mine) std::memmove(mine, in, nbytes_per_rank);
  for (size_t done = 0; done < nbytes_per_rank; done += kMaxMessageBytes) {
    const int n = static_cast<int>(std::min(kMaxMessageBytes, nbytes_per_rank - done));
    MPI_Request* req = requests_.data();
    int n_req = 0;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Irecv(out + r * nbytes_per_rank + done, n, MPI_BYTE, r, kTagBlocks, comm_,
                &req[n_req++]);
      MPI_Isend(mine + done, n, MPI_BYTE, r, kTagBlocks, comm_, &req[n_req++]);
    }
    wait(n_req, req);
  }
}

void MpiCommunicator::barrier() {
  CollectiveRecord record(true, CollectiveKind::other, 0);
  enter("barrier");
  MPI_Request request;
  MPI_Ibarrier(comm_, &request);
  wait(1, &request);
}

void MpiCommunicator::abort_job(const std::string& message) {
  log().critical("aborting the job (rank {} of {}, mpi): {}", rank_, size_, message);
  log().flush();
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this is for the compiler and for broken MPIs
}

}  // namespace fjit
