// Collective ops inside traced code, over a named replica axis (the axis pmap was given).
// Each records one instruction that calls the replica's Communicator when the plan runs, and
// has a VJP rule, so they compose with grad.
//
// The dict forms reduce every tensor of a TensorDict as a few large flat buffers (Horovod's
// tensor fusion): tensors are packed in order into buckets of at most `bucket_bytes`, each
// bucket is one all-reduce, and the results are unpacked. One call per small tensor would pay
// the collective's latency once per tensor.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/trace/ops.h"
#include "core/trace/dict.h"

namespace fjit {

// The bucket size is the trace's (TraceOptions::fusion_bytes: JitOptions::fusion_bytes, else
// FJIT_FUSION_BYTES), default 1 MiB. Packing costs two copies of every packed byte (concat
// in, slice out), while an extra all-reduce costs only its latency once buffers are large
// enough for the all-reduce to run at full bandwidth, as 1 MiB is. So small tensors share
// 1 MiB buckets and a tensor of 1 MiB or more is reduced alone, in place, without copies.
// bench/scaling_bench.cc times a training step against the bucket size and
// bench/allreduce_bench.cc the all-reduce against the buffer size; the figures that chose the
// default are in bench/RESULTS.md ("Figures quoted by the sources"). By default buckets are
// reduced after the backward pass, in dict order; with overlap (FJIT_OVERLAP,
// JitOptions::overlap) they are packed in the order the tensors were computed and each is
// reduced as soon as it is complete, on the replica's collective worker while the backward
// pass goes on, or between its instructions (core/compile/schedule.h).

Tensor psum(const Tensor& x, const std::string& axis, Loc loc = Loc::current());
// Mean over replicas. When pmap split an uneven batch, each replica's term is weighted by its
// share of the examples, so the mean of per-replica means is the exact mean over the batch;
// a replica with zero rows (parallel/join.h) has weight 0 and its (zero) mean adds nothing.
Tensor pmean(const Tensor& x, const std::string& axis, Loc loc = Loc::current());
Tensor pmax(const Tensor& x, const std::string& axis, Loc loc = Loc::current());
// Concatenation of every replica's x along axis 0, in replica order. When pmap split the
// batch unevenly (10 rows over 3 replicas: 4, 3, 3), an x with as many rows as this replica's
// shard is taken for a shard: the result holds every replica's real rows (10), not N times
// this replica's count.
Tensor all_gather(const Tensor& x, const std::string& axis, Loc loc = Loc::current());
// JAX's all_gather: tiled concatenates along gather_axis (its size grows N-fold); otherwise
// the replicas' x are stacked along a new axis of size N at gather_axis. tiled along axis 0
// is the form above (uneven shards included).
Tensor all_gather(const Tensor& x, const std::string& axis, int64_t gather_axis, bool tiled,
                  Loc loc = Loc::current());
// Reduce-scatter (JAX's psum_scatter): the sum over replicas of x, of which replica i keeps
// block i along scatter_dimension, whose size must be a multiple of the replica count N.
// tiled: that dimension shrinks N-fold; otherwise it must equal N and is removed. The bits
// are those of the same block of psum(x).
Tensor psum_scatter(const Tensor& x, const std::string& axis, int64_t scatter_dimension = 0,
                    bool tiled = false, Loc loc = Loc::current());
// JAX's all_to_all: x is split along split_axis into N blocks, block j goes to replica j,
// and the blocks received are concatenated along concat_axis in replica order. tiled: no
// axis is added or removed (split_axis shrinks, concat_axis grows N-fold); otherwise
// split_axis must have size N and is removed, and a new axis of size N is inserted at
// concat_axis.
Tensor all_to_all(const Tensor& x, const std::string& axis, int64_t split_axis, int64_t concat_axis,
                  bool tiled = false, Loc loc = Loc::current());
// JAX's ppermute: perm holds (source, destination) pairs, no replica twice as a source or a
// destination; each destination receives its source's x, and a replica that is no
// destination receives zeros.
Tensor ppermute(const Tensor& x, const std::string& axis, const std::vector<std::pair<int, int>>& perm,
                Loc loc = Loc::current());
// This replica's index on the axis, an i32 scalar.
Tensor axis_index(const std::string& axis, Loc loc = Loc::current());
// The number of replicas on the axis (known when tracing): pmap's replica count, or on a
// mesh with named axes (parallel/shard_map.h) that axis's size.
int axis_size(const std::string& axis, Loc loc = Loc::current());

TensorDict psum(const TensorDict& xs, const std::string& axis, Loc loc = Loc::current());
TensorDict pmean(const TensorDict& xs, const std::string& axis, Loc loc = Loc::current());
// The dict forms of the sharding collectives, bucketed like psum's (same bucket size): each
// tensor is scattered, gathered or permuted along its axis 0 (tiled), as the single-tensor
// calls would, but the tensors of one bucket travel as one collective.
TensorDict psum_scatter(const TensorDict& xs, const std::string& axis, Loc loc = Loc::current());
TensorDict all_gather(const TensorDict& xs, const std::string& axis, Loc loc = Loc::current());
TensorDict ppermute(const TensorDict& xs, const std::string& axis, const std::vector<std::pair<int, int>>& perm,
                    Loc loc = Loc::current());

namespace detail {
// Fails naming `name` and loc unless axis is one of the trace's pmap axes.
void require_axis(const char* name, const std::string& axis, const Loc& loc);
// Records one collective instruction (attrs.axes = `axes`).
Tensor collective(const char* name, Op op, const Tensor& x, ReduceOp r, const std::string& axis,
                  const ValueType& hint, const Loc& loc, std::vector<int64_t> axes = {});
// The ops themselves, on blocks along axis 0 (core/ir/ops.def): [N*b, ...] -> [b, ...];
// [N*b, ...] -> [N*b, ...]; x to to[axis_index] (-1: nowhere), zeros where nobody sends.
Tensor reduce_scatter0(const Tensor& x, ReduceOp op, const std::string& axis, const Loc& loc);
Tensor all_to_all0(const Tensor& x, const std::string& axis, const Loc& loc);
Tensor ppermute0(const Tensor& x, const std::string& axis, std::vector<int64_t> to, const Loc& loc);
// The fused all-reduce of several tensors (same dtype) as buckets; used by the dict forms.
std::vector<Tensor> fused_all_reduce(const std::vector<Tensor>& xs, ReduceOp op,
                                     const std::string& axis, int64_t bucket_bytes, const Loc& loc);
// The replica-weight input of the current trace, if pmap added one (uneven batches).
Tensor replica_weight();
// What pmean multiplies each replica's value by: replica weight / replicas (1 / replicas
// without a weight), a scalar of `dtype`.
Tensor mean_scale(DType dtype, Loc loc = Loc::current());
// The same for a mean over `axis`: 1 / axis_size(axis) on a mesh with named axes (which
// splits evenly: no weight), else mean_scale(dtype).
Tensor mean_scale(DType dtype, const std::string& axis, Loc loc = Loc::current());
}  // namespace detail

}  // namespace fjit
