// MPI backend: one replica per MPI rank (OpenMPI over shared memory or a network).
//
// Promises beyond communicator.h:
//  - all_reduce sums (and max/min/or) each element in rank order 0..N-1 with the same kernel
//    as the thread backend (communicator_reduce.h), so an MPI job and a ShmGroup fed the same
//    per-rank data give bitwise-identical results. MPI_Allreduce is not used because MPI does
//    not fix its combination order.
//  - Large buffers: each rank owns a chunk, receives every rank's copy of it (a direct
//    reduce-scatter), reduces it in rank order, and sends the result to every rank (a direct
//    all-gather): the bytes a good MPI_Allreduce moves, in two rounds of messages. Small
//    buffers: every rank receives every whole buffer and reduces locally, one round.
//    Messages are point-to-point on a private communicator: for the node-sized groups fjit
//    targets they have less latency than MPI's non-blocking collectives (libnbc).
//  - Buffers above 1 MiB go in 1 MiB segments, one after the other: each segment's received
//    chunk is still in cache when it is reduced and sent back. That pays off for large
//    buffers and makes no difference below a few segments.
//  - MPI_Allreduce is never called, not even for large buffers where it would be as fast:
//    with 3+ ranks MPI does not fix the order of the sums, and even with 2 ranks (a+b == b+a)
//    two NaNs with different payloads could reach ranks in either order.
//    bench/allreduce_bench.cc compares both paths below with plain MPI_Allreduce.
//  - Scratch buffers grow to the largest call and are kept: no allocation per call in fjit's
//    code after warm-up.
//  - When every rank is on this machine, all_reduce and all_reduce_apply reduce through an
//    MPI-3 shared-memory window instead of messages (mpi_shared_window.cc): each rank copies
//    into the window the chunks of its segment that the others reduce, reduces its own chunk
//    from every rank's copy (and its own source) in place of a message round, and reads the
//    others' reduced chunks in place of the other round. Same rank-order sums;
//    set_shared_memory(false) keeps to messages, as across machines. It is used at every
//    size, as it was the faster path at every size measured. pmap's plans then also get
//    their workspaces from a shared window, and a source found there (a gradient the plan
//    wrote) is read where it lies, without any copy.
//  - Every wait is on non-blocking requests, polled, so a stall is logged after warn_after
//    and the job is MPI_Abort-ed after abort_after. Both messages say which ranks have not
//    arrived and on which hosts they run, which are waiting in the same collective, and which
//    wait in another ("rank R of N (mpi, on H) has waited S s in <collective> #k; not
//    arrived: rank 3 (on node2); waiting in it: ranks 0,1 (on node1), rank 2 (on node2)"):
//    the waiting ranks learn it from each other when the deadline passes (mpi_roll_call.h),
//    at no cost to collectives that do not stall.
//
// The measurements behind these choices (segments, shared memory against messages, both
// against MPI_Allreduce, and what produced them) are in bench/RESULTS.md, "Figures quoted by
// the sources".
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/kernels/collective/communicator.h"
#include "parallel/communicator_reduce.h"
#include "parallel/mpi_roll_call.h"
#include "parallel/shm_barrier.h"
#include "parallel/stall_inspector.h"

namespace fjit {

class MpiCommunicator final : public Communicator {
 public:
  // Collective over `comm`, which it duplicates so that fjit's traffic can never match the
  // user's own messages. Initialises MPI (mpi_init_once) if nobody has.
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD,
                           StallPolicy policy = StallPolicy::from_environment());
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  bool callable_from_any_thread() const override { return serialized_; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override;
  void all_reduce_apply(const void* src, void* scratch, int64_t count, DType dtype, void* ctx,
                        ReducedBlockFn apply) override;
  // When every rank is on this machine, workspaces in a shared window of their own; the
  // window path then reads a source found there in place (mpi_shared_window.cc).
  void reserve_shared_workspace(size_t bytes) override;
  void* shared_workspace(size_t bytes) override;
  // Window segments whose source this rank had not to copy: it lay in its shared workspace.
  int64_t segments_read_in_place() const { return in_place_segments_; }
  void broadcast(void* data, size_t nbytes, int root) override;
  void all_gather(const void* send, void* recv, size_t nbytes_per_rank) override;
  // The collectives of sharding (parallel/mpi_sharding.cc): point-to-point messages, only
  // the blocks each rank needs; reduce_scatter combines in rank order like all_reduce.
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override;
  void all_to_all(const void* send, void* recv, size_t nbytes_per_rank) override;
  void permute(const void* send, void* recv, size_t nbytes, int send_to, int recv_from) override;
  void barrier() override;
  [[noreturn]] void abort_job(const std::string& message) override;

  // All-reduces run in segments of this many bytes (default kDefaultSegmentBytes; 0 = the
  // whole buffer at once). For benchmarks and tuning; see all_reduce in the .cc.
  static constexpr size_t kDefaultSegmentBytes = size_t{1} << 20;
  void set_segment_bytes(size_t bytes) { segment_bytes_ = bytes; }
  // Whether all_reduce and all_reduce_apply may use the shared-memory window (default true);
  // every rank must say the same. For tests and benchmarks of the message path.
  void set_shared_memory(bool on) { use_shared_memory_ = on; }
  // Shared windows are only made where every rank sees at least twice their size free in
  // OpenMPI's backing directory (OMPI_MCA_osc_sm_backing_directory, else /dev/shm), or in
  // this budget if it is smaller (default: no budget); otherwise the communicator does
  // without (messages, plans' own memory) and rank 0 logs a warning. OpenMPI itself would
  // abort the job. Every rank must say the same.
  void set_shared_memory_budget(int64_t bytes) { shared_memory_budget_ = bytes; }

  const StallPolicy& policy() const { return policy_; }
  MPI_Comm comm() const { return comm_; }

 private:
  void enter(const char* name, uint64_t bytes = 0);
  // The activity poll (core/base/activity.h): answers stall roll calls while computing.
  static void poll_point(void* self);
  // Polls `n` requests to completion under the stall policy.
  void wait(int n, MPI_Request* requests);
  // The stall policy's messages for this rank, having waited `waited` seconds in the current
  // collective: logged at warn_after, and the job aborted at abort_after, each after a roll
  // call of the other ranks. Used by wait() and by the shared window's barrier
  // (mpi_shared_window.cc), which also call answer_roll_call() while they sleep.
  void warn_stall(double waited);
  [[noreturn]] void abort_stall(double waited);
  void answer_roll_call() { roll_call_->answer(collective_, calls_); }
  // How long a roll call waits for the other ranks' answers.
  std::chrono::milliseconds roll_call_grace() const;
  class WindowWaiter;
  void all_reduce_segment(unsigned char* data, int count, DType dtype, ReduceOp op);
  unsigned char* scratch(size_t nbytes);
  // Block r of `in` to every other rank r, and rank r's block for this one to out + r * block,
  // in nonblocking rounds under the stall policy (reduce_scatter, all_to_all).
  void exchange_blocks(const unsigned char* in, unsigned char* out, size_t block, int tag);
  // The shared-memory window of all_reduce and all_reduce_apply (allocated by every rank at
  // its first call), or false when the ranks do not share one machine or it does not fit.
  bool shared_window();
  // Collective: a shared window of `bytes` per rank (allocated 64 bytes larger), every
  // rank's part, 64-byte aligned, in `parts`; false (window MPI_WIN_NULL) if MPI refused.
  bool allocate_shared(int64_t bytes, MPI_Win* window, std::vector<unsigned char*>* parts);
  // Collective: whether shared windows of bytes_per_rank on every rank fit (see
  // set_shared_memory_budget); the same answer on every rank; rank 0 warns when not.
  bool shared_memory_fits(int64_t bytes_per_rank, const char* what);
  // Reduces every rank's `count` elements of `src` with `op` through the window (REQUIRES
  // shared_window()), segment by segment, handing each reduced chunk to apply(ctx, ...).
  // With own_out (a buffer of count elements, which may be src itself), this rank's chunks
  // are reduced straight into it and not handed to apply.
  void window_reduce(const void* src, int64_t count, DType dtype, ReduceOp op, void* ctx,
                     ReducedBlockFn apply, void* own_out = nullptr);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool serialized_ = false;  // mpi_serialized_threads(), read once
  int local_size_ = 1;  // ranks of comm on this machine
  const StallPolicy policy_;
  WaitPacing pacing_;  // spins less when more ranks share this machine than it has cores
  const char* collective_ = "(none)";
  uint64_t calls_ = 0;
  std::thread::id owner_;  // the thread that may call MPI (and answers at poll points)
  std::chrono::steady_clock::time_point last_poll_{};
  std::unique_ptr<MpiRollCall> roll_call_;  // who is where, asked only when a wait stalls
  size_t segment_bytes_ = kDefaultSegmentBytes;
  // Kept across calls so that the hot path does not allocate.
  std::vector<unsigned char> scratch_;
  std::vector<MPI_Request> requests_;  // two per peer
  std::vector<ElementRange> chunks_;   // the all-reduce chunk each rank owns
  std::vector<const void*> inputs_;
  // The window of all_reduce and all_reduce_apply: per rank, two sets (alternate segments)
  // of an input and a result area of kDefaultSegmentBytes each, and a control area; base
  // addresses of every rank's part.
  int shared_state_ = 0;  // 0 not tried, 1 available, -1 not possible
  ShmBarrier* window_barrier_ = nullptr;  // in the window: where the ranks meet
  bool window_sense_ = false;             // this rank's side of window_barrier_
  bool use_shared_memory_ = true;
  MPI_Win window_ = MPI_WIN_NULL;
  std::vector<unsigned char*> window_base_;
  // reserve_shared_workspace's window: every rank's part, of workspace_bytes_ each.
  MPI_Win workspace_window_ = MPI_WIN_NULL;
  std::vector<unsigned char*> workspace_base_;
  size_t workspace_bytes_ = 0;
  size_t workspace_refused_ = 0;  // the largest size shared_memory_fits refused
  int64_t shared_memory_budget_ = std::numeric_limits<int64_t>::max();
  int64_t in_place_segments_ = 0;
  uint64_t apply_segments_ = 0;  // which set the next segment uses
};

}  // namespace fjit
