// VJP rules for reductions, layout, indexing and collectives (see rules_elementwise.cc).
#include <algorithm>

#include "core/autodiff/autodiff.h"
#include "core/trace/collectives.h"

namespace fjit::autodiff {
using Cts = std::vector<Tensor>;

namespace {

// x's shape with the reduced axes kept as extent 1: the shape a keepdims result has.
Shape kept_shape(const Node& n, const Shape& in) {
  Shape s = in;
  for (int64_t a : n.attrs.axes) s[a] = 1;
  return s;
}

}  // namespace

Cts rule_reduce_sum(const VjpArgs& a) {
  const Shape xs = a.ins[0].shape();  // a copy: building ops grows the node list
  return {broadcast_to(reshape(a.ct, kept_shape(a.node, xs)), xs)};
}

// The cotangent goes to the elements equal to the extremum, split equally among ties (the
// total over a tie is exact; a two-way tie matches central differences).
Cts rule_reduce_extremum(const VjpArgs& a) {
  const Tensor& x = a.ins[0];
  const Shape ks = kept_shape(a.node, x.shape());
  Tensor hit = eq(x, reshape(a.out, ks));
  Tensor mask = where(hit, scalar(x.dtype(), 1.0), scalar(x.dtype(), 0.0));
  Tensor count = sum(mask, a.node.attrs.axes, true);
  return {mul(mask, div(reshape(a.ct, ks), count))};
}

// The cotangent of an inclusive cumsum: element i feeds every output at or after it, so it
// gets the cumsum of the cotangent from the other end.
Cts rule_cumsum(const VjpArgs& a) {
  return {cumsum(a.ct, static_cast<int>(a.node.attrs.axis), !a.node.attrs.reverse)};
}

Cts rule_reshape(const VjpArgs& a) { return {reshape(a.ct, a.ins[0].shape())}; }

Cts rule_transpose(const VjpArgs& a) {
  const auto& perm = a.node.attrs.axes;
  Axes inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return {transpose(a.ct, inverse)};
}

Cts rule_broadcast_to(const VjpArgs& a) { return {unbroadcast(a.ct, a.ins[0].shape())}; }

Cts rule_concat(const VjpArgs& a) {
  const int64_t axis = a.node.attrs.axis;
  Cts r(a.ins.size());
  int64_t offset = 0;
  for (size_t i = 0; i < a.ins.size(); ++i) {
    const Shape s = a.ins[i].shape();
    if (a.need[i]) {
      const Shape cts = a.ct.shape();
      Axes starts(s.size(), 0), limits(cts.begin(), cts.end());
      starts[axis] = offset;
      limits[axis] = offset + s[axis];
      r[i] = slice(a.ct, starts, limits);
    }
    offset += s[axis];
  }
  return r;
}

// The adjoint of a slice puts the cotangent back in place with zeros around it, one dimension
// at a time: a concat with zero blocks for unit steps, a scatter_add at the strided
// positions (start + step * j) otherwise.
Cts rule_slice(const VjpArgs& a) {
  const Attrs& at = a.node.attrs;
  const Shape xs = a.ins[0].shape();
  Tensor g = a.ct;
  if (g.size() == 0) return {full(g.dtype(), xs, 0.0)};  // the cotangent's dtype (f32 for a bf16 x)
  for (int d = 0; d < static_cast<int>(xs.size()); ++d) {
    const int64_t n = xs[d], start = at.starts[d], limit = at.limits[d], step = at.steps[d];
    if (g.shape()[d] == n) continue;  // the whole dimension was taken
    Shape full_shape = g.shape();
    full_shape[d] = n;
    if (step == 1) {
      std::vector<Tensor> parts;
      Shape pad = g.shape();
      if (start > 0) {
        pad[d] = start;
        parts.push_back(full(g.dtype(), pad, 0.0));
      }
      parts.push_back(g);
      if (limit < n) {
        pad[d] = n - limit;
        parts.push_back(full(g.dtype(), pad, 0.0));
      }
      g = concat(parts, d);
    } else {
      Tensor idx = iota(DType::i32, {g.shape()[d]}) * static_cast<double>(step) + static_cast<double>(start);
      g = scatter_add(g, idx, full_shape, d);
    }
  }
  return {g};
}

Cts rule_gather(const VjpArgs& a) {
  return {scatter_add(a.ct, a.ins[1], a.ins[0].shape(), a.node.attrs.axis), Tensor()};
}

// The cross entropy's gradient in one op: (softmax(logits) - onehot(label)) * ct.
Cts rule_softmax_xent(const VjpArgs& a) {
  Attrs at;
  at.axis = a.node.attrs.axis;
  return {detail::build("softmax_xent_grad", Op::SoftmaxXentGrad, {a.ins[0], a.ins[1], a.ct},
                        std::move(at), ValueType{a.ins[0].dtype(), a.ins[0].shape()}, nullptr),
          Tensor()};
}

Cts rule_scatter_add(const VjpArgs& a) {
  return {gather(a.ct, a.ins[1], a.node.attrs.axis), Tensor()};
}

// patches and patches_adjoint are each other's transpose over the same resolved window;
// cotangents of padding elements are dropped.
Cts rule_patches(const VjpArgs& a) {
  Attrs at;
  at.window = a.node.attrs.window;
  return {detail::build("patches_adjoint", Op::PatchesAdjoint, {a.ct}, std::move(at),
                        ValueType{a.ct.dtype(), a.ins[0].shape()}, nullptr)};
}

Cts rule_patches_adjoint(const VjpArgs& a) {
  Attrs at;
  at.window = a.node.attrs.window;
  return {detail::build("patches", Op::Patches, {a.ct}, std::move(at),
                        ValueType{a.ct.dtype(), {}}, nullptr)};
}

// Every replica's loss depends on every replica's x through the all-reduce, so the cotangent
// of x is the sum over replicas of the output cotangents. For max/min only the replicas that
// hold the extremum receive it, split equally among ties.
Cts rule_all_reduce(const VjpArgs& a) {
  const std::string& axis = a.node.attrs.name;
  const auto op = static_cast<ReduceOp>(a.node.attrs.reduce);
  Tensor total = psum(a.ct, axis);
  if (op == ReduceOp::sum) return {total};
  const Tensor& x = a.ins[0];
  Tensor mask = where(eq(x, a.out), scalar(x.dtype(), 1.0), scalar(x.dtype(), 0.0));
  return {div(mul(total, mask), psum(mask, axis))};
}

// all_gather stacks the replicas' x along axis 0: x's cotangent is this replica's rows of
// the summed output cotangents, which is what a reduce-scatter of them gives (the same bits
// as psum's slice, moving 1/N of the data). With uneven shards (attrs.axes: every replica's
// rows) the blocks differ in size: the cotangents are summed whole and this replica's rows,
// which start at the sum of the rows before it (a table read by axis_index), picked out.
Cts rule_all_gather(const VjpArgs& a) {
  const std::string& axis = a.node.attrs.name;
  const int64_t rows = a.ins[0].shape()[0];
  const auto& shards = a.node.attrs.axes;
  if (shards.empty()) return {detail::reduce_scatter0(a.ct, ReduceOp::sum, axis, Loc::current())};
  Array starts(DType::i32, {static_cast<int64_t>(shards.size())});
  int32_t off = 0;
  for (size_t r = 0; r < shards.size(); ++r) {
    starts.data<int32_t>()[r] = off;
    off += static_cast<int32_t>(shards[r]);
  }
  Tensor first = reshape(take(constant(starts), reshape(axis_index(axis), {1}), 0), {});
  return {take(psum(a.ct, axis), first + iota(DType::i32, {rows}), 0)};
}

// The collectives of sharding are linear; each one's transpose is its partner: reduce-scatter
// and all-gather (tiled, axis 0), all_to_all and itself (block r goes to replica r and comes
// back from it), ppermute and the inverse permutation.
Cts rule_reduce_scatter(const VjpArgs& a) {
  if (static_cast<ReduceOp>(a.node.attrs.reduce) != ReduceOp::sum)
    detail::fail("psum_scatter", {a.ins[0]}, "only the sum is differentiable", nullptr);
  Shape s = a.ct.shape();
  s[0] = a.ins[0].shape()[0];
  return {detail::collective("all_gather", Op::AllGather, a.ct, ReduceOp::sum, a.node.attrs.name,
                             {a.ct.dtype(), s}, Loc::current())};
}

Cts rule_all_to_all(const VjpArgs& a) { return {detail::all_to_all0(a.ct, a.node.attrs.name, Loc::current())}; }

Cts rule_ppermute(const VjpArgs& a) {
  const auto& to = a.node.attrs.axes;
  std::vector<int64_t> back(to.size(), -1);
  for (size_t src = 0; src < to.size(); ++src)
    if (to[src] >= 0) back[static_cast<size_t>(to[src])] = static_cast<int64_t>(src);
  return {detail::ppermute0(a.ct, a.node.attrs.name, std::move(back), Loc::current())};
}

}  // namespace fjit::autodiff
