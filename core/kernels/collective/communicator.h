// Communicator: the narrow interface every collective in fjit goes through. It is declared in
// core because a plan's collective instructions call it at run time; the backends that
// implement it (threads, MPI) live in the parallel layer.
//
// One Communicator object belongs to one replica (a thread or an MPI rank). All replicas of a
// group must call the same collectives in the same order with the same sizes; a replica that
// does not arrive is reported by the backend's stall inspector (its StallPolicy), never waited on
// silently forever.
//
// Promises shared by every implementation:
//  - Reductions combine contributions in rank order 0, 1, ..., size-1, so every replica
//    receives a bitwise-identical result, and the thread and MPI backends give identical
//    results for the same data.
//  - Buffers are the caller's; calls are blocking and return when the result is in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/ir/dtype.h"
#include "core/ir/op.h"

namespace fjit {


class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "threads" or "mpi".
  virtual std::string backend() const = 0;

  // In-place all-reduce of `count` elements of `dtype` (DType::boolean = bytes; logical_or
  // and max/min apply to bytes too).
  virtual void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  // The sum of every replica's `src` (f32 or f64, in rank order: all_reduce's result), handed
  // to `apply` block by block instead of being stored: for every block [begin, begin + count)
  // of the result, apply(ctx, begin, count, values) runs once with each replica's `ctx` (as
  // that replica passed it), on some replica's thread. So an update that reads the reduced
  // gradient (p - lr * g) is applied while the block is in cache, and the gradient is never
  // written back. Every replica calls it with the same count and dtype; it returns on each
  // when every block has been applied for it. `scratch` (count elements, not overlapping src)
  // may be used to hold the reduced values; `apply` must not read it otherwise. The default
  // reduces a copy of src in scratch with all_reduce, then applies it whole.
  using ReducedBlockFn = void (*)(void* ctx, int64_t begin, int64_t count, const void* values);
  virtual void all_reduce_apply(const void* src, void* scratch, int64_t count, DType dtype,
                                void* ctx, ReducedBlockFn apply);
  // Plans' workspaces (their arenas of intermediates) in memory every replica can read, so
  // that a collective reads a gradient where the plan wrote it instead of copying it first.
  // Only a backend whose replicas are processes on one machine has them; the defaults have
  // none, and a plan then uses memory of its own.
  // reserve_shared_workspace is collective: every replica calls it at the same point with
  // the same `bytes` (pmap does, each step, with the largest workspace any replica's plan
  // needs: uneven shards can give replicas plans of different sizes). It grows this
  // replica's shared workspace to at least `bytes`, and never shrinks it.
  virtual void reserve_shared_workspace(size_t bytes) { (void)bytes; }
  // This replica's shared workspace, 64-byte aligned, when at least `bytes` are reserved;
  // null otherwise. Valid until the next reserve_shared_workspace that grows it.
  virtual void* shared_workspace(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  // Whether another thread than the one that made the communicator may make its calls (one
  // thread at a time): a plan's overlapped collectives run on the replica's collective worker
  // (core/compile/collective_worker.h), and otherwise on the plan's own thread.
  virtual bool callable_from_any_thread() const { return true; }
  // Copies `nbytes` from `root`'s buffer into every replica's buffer.
  virtual void broadcast(void* data, size_t nbytes, int root) = 0;
  // recv (size()*nbytes_per_rank bytes) receives every rank's `send` block in rank order.
  virtual void all_gather(const void* send, void* recv, size_t nbytes_per_rank) = 0;
  // The collectives of sharding. Each has a default built on all_reduce and all_gather (so
  // every backend has them, with all_reduce's rank-order bits); a backend overrides them to
  // move only what each replica needs.
  //
  // recv (count elements) receives block rank() of the all-reduce of every replica's `send`
  // (size()*count elements): the same bits as that all-reduce's slice.
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op);
  // Block r of `send` (nbytes_per_rank each, size() blocks) goes to replica r; block r of
  // `recv` is what replica r sent this one.
  virtual void all_to_all(const void* send, void* recv, size_t nbytes_per_rank);
  // Every replica sends its `nbytes` of `send` to replica `send_to` and receives `recv` from
  // `recv_from` (-1: nobody; it sends nothing or receives zeros). The pairs must agree: r's
  // send_to is s exactly when s's recv_from is r.
  virtual void permute(const void* send, void* recv, size_t nbytes, int send_to, int recv_from);
  // all_gather of blocks of different sizes: replica r contributes bytes_per_rank[r] bytes
  // (every replica passes the same table) and recv receives them back to back in rank order.
  virtual void all_gather_uneven(const void* send, void* recv, const int64_t* bytes_per_rank);
  virtual void barrier() = 0;
  // The communicator of the replicas that share this one's coordinates on every mesh axis but
  // `axis` (parallel/mesh.h: a mesh with named axes); a collective over `axis` runs on it.
  // A one-axis group answers itself for every name (the trace already checked the name).
  virtual Communicator* for_axis(const std::string& axis) {
    (void)axis;
    return this;
  }
  // Ends the whole job (every replica) after logging `message`. Never returns.
  [[noreturn]] virtual void abort_job(const std::string& message) = 0;
};

}  // namespace fjit
