// Batching rules of the ops that compute (elementwise, reductions, layout, matmul, indexing,
// attention and the row ops, collectives): each reads operands with the batch axis first and
// returns a value with the batch axis first.
#include <algorithm>

#include "core/autodiff/batching.h"

namespace fjit {
namespace batching {

namespace {
int rank_of(const Shape& s) { return static_cast<int>(s.size()); }
}  // namespace

// A batched operand gets unit axes up to the result's rank, so that NumPy broadcasting lines
// its batch axis up with the result's; an unbatched operand broadcasts as it is.
Batched batch_elementwise(const BatchArgs& a) {
  const int r = rank_of(a.node.shape);
  std::vector<Tensor> ins;
  for (const Batched& b : a.ins) ins.push_back(b.batched ? pad_rank(b.t, r) : b.t);
  return {emit(a.node, ins, a.node.attrs, {a.node.dtype, with_batch(a.size, a.node.shape)}), true, {}};
}

// Reductions, argmax/argmin, top_k and cumsum: the same op with its axes moved past the batch.
Batched batch_axis_shift(const BatchArgs& a) {
  Attrs at = a.node.attrs;
  for (int64_t& ax : at.axes) ++ax;
  if (at.axes.empty()) ++at.axis;  // argmax, argmin, top_k, cumsum
  return {emit(a.node, {a.ins.at(0).t}, at, {a.node.dtype, with_batch(a.size, a.node.shape)}), true, {}};
}

// A batched operand times an unbatched matrix is one GEMM over every row of the batch (the
// kernel folds the leading axes of x [B, ..., M, K] into the GEMM's rows, with no copy); other
// cases are a batched product over [B, ...the result's batch dims] (a rank-2 unbatched operand
// broadcasts as it is).
Batched batch_matmul(const BatchArgs& a) {
  const Batched& x = a.ins.at(0);
  const Batched& y = a.ins.at(1);
  const Shape out = a.node.shape;
  const int r = rank_of(out);
  const Attrs& at = a.node.attrs;
  const ValueType hint{a.node.dtype, {}};
  if (x.batched && !y.batched && y.t.rank() == 2 && !at.trans_a)  // [B, ..., M, K] x [K, N]
    return {emit(a.node, {x.t, y.t}, at, {a.node.dtype, with_batch(a.size, out)}), true, {}};
  Shape batch_dims = with_batch(a.size, Shape(out.begin(), out.end() - 2));
  auto full = [&](const Batched& b) {
    if (!b.batched && b.t.rank() == 2) return b.t;
    const Shape s = b.t.shape();
    Shape target = batch_dims;
    target.insert(target.end(), s.end() - 2, s.end());
    if (!b.batched) return broadcast_to(b.t, target);
    return broadcast_to(pad_rank(b.t, r), target);
  };
  return {emit(a.node, {full(x), full(y)}, at, hint), true, {}};
}

Batched batch_reshape(const BatchArgs& a) {
  return {emit(a.node, {a.ins.at(0).t}, a.node.attrs, {a.node.dtype, with_batch(a.size, a.node.shape)}), true, {}};
}

Batched batch_transpose(const BatchArgs& a) {
  Attrs at = a.node.attrs;
  Axes perm{0};
  for (int64_t p : a.node.attrs.axes) perm.push_back(p + 1);
  at.axes = perm;
  return {emit(a.node, {a.ins.at(0).t}, at, {a.node.dtype, {}}), true, {}};
}

Batched batch_broadcast_to(const BatchArgs& a) {
  const Tensor x = pad_rank(a.ins.at(0).t, rank_of(a.node.shape));
  return {emit(a.node, {x}, a.node.attrs, {a.node.dtype, with_batch(a.size, a.node.shape)}), true, {}};
}

Batched batch_concat(const BatchArgs& a) {
  std::vector<Tensor> ins;
  for (const Batched& b : a.ins) ins.push_back(materialize(b, a.size));
  Attrs at = a.node.attrs;
  ++at.axis;
  return {emit(a.node, ins, at, {a.node.dtype, {}}), true, {}};
}

Batched batch_slice(const BatchArgs& a) {
  Attrs at = a.node.attrs;
  at.starts.insert(at.starts.begin(), 0);
  at.limits.insert(at.limits.begin(), a.size);
  if (!at.steps.empty()) at.steps.insert(at.steps.begin(), 1);
  return {emit(a.node, {a.ins.at(0).t}, at, {a.node.dtype, {}}), true, {}};
}

// Ops that already map over their leading axis (patches and its adjoint: images; attention
// and its gradient: the batch of sequences): the batch is merged into that axis.
Batched batch_leading(const BatchArgs& a) {
  std::vector<Tensor> ins;
  for (const Batched& b : a.ins) {
    const Tensor t = materialize(b, a.size);
    Shape s = t.shape();
    if (s.size() < 2)
      throw TraceError(std::string("fjit: vmap: ") + op_name(a.node.op) + " needs operands of rank >= 1");
    Shape merged{s[0] * s[1]};
    merged.insert(merged.end(), s.begin() + 2, s.end());
    ins.push_back(reshape(t, merged));
  }
  Shape out = a.node.shape;
  Shape merged{a.size * out.at(0)};
  merged.insert(merged.end(), out.begin() + 1, out.end());
  const Tensor r = emit(a.node, ins, a.node.attrs, {a.node.dtype, merged});
  return {reshape(r, with_batch(a.size, out)), true, {}};
}

// softmax_xent and its gradient: rows of logits against rows of labels, the batch one more
// leading axis of both.
Batched batch_rows(const BatchArgs& a) {
  std::vector<Tensor> ins;
  for (const Batched& b : a.ins) ins.push_back(materialize(b, a.size));
  Attrs at = a.node.attrs;
  ++at.axis;
  return {emit(a.node, ins, at, {a.node.dtype, with_batch(a.size, a.node.shape)}), true, {}};
}

// gather(x, idx, axis). A batched x gathers along axis + 1; batched indices alone gather the
// unbatched x and move their batch axis first; both batched, each example's indices are
// clamped (as the kernel clamps) and offset into the rows of its own example.
Batched batch_gather(const BatchArgs& a) {
  const Batched& x = a.ins.at(0);
  const Batched& idx = a.ins.at(1);
  const int axis = static_cast<int>(a.node.attrs.axis);
  Attrs at = a.node.attrs;
  const ValueType hint{a.node.dtype, {}};
  if (!idx.batched) {
    ++at.axis;
    return {emit(a.node, {x.t, idx.t}, at, hint), true, {}};
  }
  if (!x.batched) return {move_axis(emit(a.node, {x.t, idx.t}, at, hint), axis, 0), true, {}};
  const Shape xs = x.t.shape();  // [B, pre..., A, post...]
  const int64_t extent = xs[axis + 1];
  const DType it = idx.t.dtype();
  const Tensor clamped = maximum(minimum(idx.t, scalar(it, static_cast<double>(extent - 1))), scalar(it, 0));
  Shape os(static_cast<size_t>(idx.t.rank()), 1);
  os[0] = a.size;
  const Tensor offsets = mul(iota(it, os, 0), scalar(it, static_cast<double>(extent)));
  Shape flat(xs.begin() + 1, xs.end());
  flat[axis] = a.size * extent;
  const Tensor rows = reshape(move_axis(x.t, 0, axis), flat);
  return {move_axis(emit(a.node, {rows, add(clamped, offsets)}, at, hint), axis, 0), true, {}};
}

// scatter_add(updates, idx) into the example's operand shape. Batched indices scatter each
// example into its own rows of a [pre..., B * A, post...] operand; an index outside [0, A)
// stays outside (the kernel drops it).
Batched batch_scatter_add(const BatchArgs& a) {
  const Batched& upd = a.ins.at(0);
  const Batched& idx = a.ins.at(1);
  const int axis = static_cast<int>(a.node.attrs.axis);
  Attrs at = a.node.attrs;
  if (!idx.batched) {
    ++at.axis;
    return {emit(a.node, {upd.t, idx.t}, at, {a.node.dtype, with_batch(a.size, a.node.shape)}), true, {}};
  }
  const Shape os = a.node.shape;  // [pre..., A, post...]
  const int64_t extent = os[axis];
  const DType it = idx.t.dtype();
  Shape ob(static_cast<size_t>(idx.t.rank()), 1);
  ob[0] = a.size;
  const Tensor offsets = mul(iota(it, ob, 0), scalar(it, static_cast<double>(extent)));
  const Tensor inside = logical_and(ge(idx.t, scalar(it, 0)), lt(idx.t, scalar(it, static_cast<double>(extent))));
  const Tensor out_of_range = scalar(it, static_cast<double>(a.size * extent));
  const Tensor where_to = where(inside, add(idx.t, offsets), out_of_range);
  Shape flat = os;
  flat[axis] = a.size * extent;
  const Tensor u = move_axis(materialize(upd, a.size), 0, axis);
  const Tensor r = emit(a.node, {u, where_to}, at, {a.node.dtype, flat});
  Shape split = os;
  split[axis] = extent;
  split.insert(split.begin() + axis, a.size);
  return {move_axis(reshape(r, split), axis, 0), true, {}};
}

// Collectives: the batch axis passes through (a sum over replicas of every example).
Batched batch_all_reduce(const BatchArgs& a) {
  return {emit(a.node, {a.ins.at(0).t}, a.node.attrs, {a.node.dtype, with_batch(a.size, a.node.shape)}), true, {}};
}

// The collectives on axis-0 blocks (all_gather stacks the replicas' shards, reduce_scatter
// keeps this replica's block of the sum, all_to_all exchanges blocks, ppermute moves the whole
// operand): run with the batch as axis 1, so every block holds all examples, then the batch
// moves first again.
Batched batch_blocks(const BatchArgs& a) {
  const Tensor x = move_axis(a.ins.at(0).t, 0, 1);
  Shape out = a.node.shape;
  out.insert(out.begin() + 1, a.size);
  return {move_axis(emit(a.node, {x}, a.node.attrs, {a.node.dtype, out}), 1, 0), true, {}};
}

}  // namespace batching
}  // namespace fjit
