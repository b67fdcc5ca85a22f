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
// Concatenation of every replica's x along axis 0, in replica order.
Tensor all_gather(const Tensor& x, const std::string& axis, Loc loc = Loc::current());
// This replica's index on the axis, an i32 scalar.
Tensor axis_index(const std::string& axis, Loc loc = Loc::current());

TensorDict psum(const TensorDict& xs, const std::string& axis, Loc loc = Loc::current());
TensorDict pmean(const TensorDict& xs, const std::string& axis, Loc loc = Loc::current());

namespace detail {
// The fused all-reduce of several tensors (same dtype) as buckets; used by the dict forms.
std::vector<Tensor> fused_all_reduce(const std::vector<Tensor>& xs, ReduceOp op,
                                     const std::string& axis, int64_t bucket_bytes, const Loc& loc);
// The replica-weight input of the current trace, if pmap added one (uneven batches).
Tensor replica_weight();
// What pmean multiplies each replica's value by: replica weight / replicas (1 / replicas
// without a weight), a scalar of `dtype`.
Tensor mean_scale(DType dtype, Loc loc = Loc::current());
}  // namespace detail

}  // namespace fjit
