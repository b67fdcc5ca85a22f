#include "core/trace/collectives.h"

#include <algorithm>

namespace fjit {
namespace detail {

void require_axis(const char* name, const std::string& axis, const Loc& loc) {
  TraceContext* ctx = TraceContext::current();
  if (!ctx) detail::fail(name, {}, "called outside a traced function", &loc);
  const auto& names = ctx->axis_names;
  if (std::find(names.begin(), names.end(), axis) == names.end()) {
    std::string have;
    for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
    detail::fail(name, {}, "unknown axis name '" + axis + "' (pmap axes: " +
                 (have.empty() ? std::string("none: not inside pmap") : have) + ")", &loc);
  }
}

Tensor collective(const char* name, Op op, const Tensor& x, ReduceOp r, const std::string& axis,
                  const ValueType& hint, const Loc& loc, std::vector<int64_t> axes) {
  require_axis(name, axis, loc);
  Attrs a;
  a.reduce = static_cast<uint8_t>(r);
  a.name = axis;
  a.axes = std::move(axes);
  a.index = TraceContext::current()->next_effect_id();
  std::vector<Tensor> ins;
  if (x.defined()) ins.push_back(x);
  return detail::build(name, op, ins, std::move(a), hint, &loc);
}
}  // namespace detail

using detail::collective;
using detail::require_axis;

Tensor psum(const Tensor& x, const std::string& axis, Loc loc) {
  return collective("psum", Op::AllReduce, x, ReduceOp::sum, axis, {}, loc);
}

Tensor pmax(const Tensor& x, const std::string& axis, Loc loc) {
  return collective("pmax", Op::AllReduce, x, ReduceOp::max, axis, {}, loc);
}

// The mean is psum(x * (w / n)): the replica weight and 1/n meet in one scalar, so the
// tensor is scaled in a single pass before the reduction (scaling after it as well would be
// a second full pass over every gradient).
namespace detail {
Tensor mean_scale(DType dtype, Loc loc) {
  const int n = TraceContext::current()->num_replicas;
  Tensor inv_n = scalar(dtype, 1.0 / n, loc);
  Tensor w = detail::replica_weight();
  return w.defined() ? mul(cast(w, dtype, loc), inv_n, loc) : inv_n;
}

Tensor mean_scale(DType dtype, const std::string& axis, Loc loc) {
  const TraceContext* ctx = TraceContext::current();
  if (ctx->axis_sizes.empty()) return mean_scale(dtype, loc);
  return scalar(dtype, 1.0 / axis_size(axis, loc), loc);
}
}  // namespace detail

int axis_size(const std::string& axis, Loc loc) {
  require_axis("axis_size", axis, loc);
  const TraceContext& ctx = *TraceContext::current();
  for (size_t i = 0; i < ctx.axis_sizes.size() && i < ctx.axis_names.size(); ++i)
    if (ctx.axis_names[i] == axis) return ctx.axis_sizes[i];
  return ctx.num_replicas;
}

Tensor pmean(const Tensor& x, const std::string& axis, Loc loc) {
  require_axis("pmean", axis, loc);
  if (!x.defined() || !is_floating(x.dtype())) detail::fail("pmean", {x}, "expects a floating-point tensor", &loc);
  return psum(mul(x, detail::mean_scale(x.dtype(), axis, loc), loc), axis, loc);
}

Tensor all_gather(const Tensor& x, const std::string& axis, Loc loc) {
  if (!x.defined() || x.rank() == 0) detail::fail("all_gather", {x}, "needs a tensor of rank >= 1", &loc);
  require_axis("all_gather", axis, loc);
  const TraceContext& ctx = *TraceContext::current();
  Shape s = x.shape();
  // A shard of pmap's uneven split (as many rows as this replica was given): the real rows
  // of every replica, back to back.
  if (!ctx.shard_rows.empty() && s[0] == ctx.local_rows) {
    s[0] = 0;
    for (int64_t r : ctx.shard_rows) s[0] += r;
    return collective("all_gather", Op::AllGather, x, ReduceOp::sum, axis, {x.dtype(), s}, loc, ctx.shard_rows);
  }
  s[0] *= axis_size(axis, loc);
  return collective("all_gather", Op::AllGather, x, ReduceOp::sum, axis, {x.dtype(), s}, loc);
}

Tensor axis_index(const std::string& axis, Loc loc) {
  return collective("axis_index", Op::AxisIndex, Tensor(), ReduceOp::sum, axis, {DType::i32, {}}, loc);
}

namespace detail {

std::vector<Tensor> fused_all_reduce(const std::vector<Tensor>& xs, ReduceOp op,
                                     const std::string& axis, int64_t bucket_bytes, const Loc& loc) {
  auto bytes_of = [](const Tensor& t) { return t.size() * dtype_size(t.dtype()); };
  std::vector<Tensor> out(xs.size());
  size_t i = 0;
  while (i < xs.size()) {
    // One bucket: consecutive tensors of one dtype within bucket_bytes (at least one tensor).
    size_t j = i + 1;
    int64_t bytes = bytes_of(xs[i]);
    while (j < xs.size() && xs[j].dtype() == xs[i].dtype() && bytes + bytes_of(xs[j]) <= bucket_bytes) {
      bytes += bytes_of(xs[j]);
      ++j;
    }
    if (j == i + 1) {
      // A bucket of one tensor is reduced in its own shape: flattening it would cost two
      // copies (reshapes are copies in the plan) for an all-reduce that is elementwise anyway.
      out[i] = collective("psum", Op::AllReduce, xs[i], op, axis, {}, loc);
      i = j;
      continue;
    }
    std::vector<Tensor> flat;
    for (size_t k = i; k < j; ++k) flat.push_back(reshape(xs[k], {xs[k].size()}, loc));
    Tensor reduced = collective("psum", Op::AllReduce, concat(flat, 0, loc), op, axis, {}, loc);
    int64_t offset = 0;
    for (size_t k = i; k < j; ++k) {
      const int64_t n = xs[k].size();
      out[k] = reshape(slice(reduced, {offset}, {offset + n}, {1}, loc), xs[k].shape(), loc);
      offset += n;
    }
    i = j;
  }
  return out;
}

Tensor replica_weight() {
  TraceContext* ctx = TraceContext::current();
  if (!ctx) return Tensor();
  for (int p : ctx->graph.parameters)
    if (ctx->graph.node(p).attrs.name == "__replica_weight")
      return Tensor::from_node(ctx, p);
  return Tensor();
}

}  // namespace detail

namespace {
TensorDict reduce_dict(const TensorDict& xs, const std::string& axis, bool mean, const Loc& loc) {
  std::vector<Tensor> leaves;
  for (const auto& kv : xs) {
    Tensor t = kv.second;
    if (mean) {
      if (!is_floating(t.dtype())) detail::fail("pmean", {t}, "expects floating-point tensors", &loc);
      t = mul(t, detail::mean_scale(t.dtype(), axis, loc), loc);
    }
    leaves.push_back(t);
  }
  // In computation order when the plan overlaps its collectives (TraceOptions).
  std::vector<size_t> order(leaves.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const TraceContext* ctx = TraceContext::current();
  if (ctx != nullptr && ctx->options.overlap_collectives)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return xs.value(a).id() < xs.value(b).id(); });
  std::vector<Tensor> packed;
  for (size_t i : order) packed.push_back(leaves[i]);
  const int64_t bucket_bytes =
      ctx != nullptr ? ctx->options.fusion_bytes : TraceOptions{}.fusion_bytes;
  std::vector<Tensor> r = detail::fused_all_reduce(packed, ReduceOp::sum, axis, bucket_bytes, loc);
  std::vector<Tensor> reduced(leaves.size());
  for (size_t k = 0; k < order.size(); ++k) reduced[order[k]] = r[k];
  TensorDict out;
  for (size_t i = 0; i < reduced.size(); ++i) out.set(xs.name(i), reduced[i]);
  return out;
}
}  // namespace

TensorDict psum(const TensorDict& xs, const std::string& axis, Loc loc) {
  require_axis("psum", axis, loc);
  return reduce_dict(xs, axis, false, loc);
}

TensorDict pmean(const TensorDict& xs, const std::string& axis, Loc loc) {
  require_axis("pmean", axis, loc);
  return reduce_dict(xs, axis, true, loc);
}

}  // namespace fjit
