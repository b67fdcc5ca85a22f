// The collectives of sharding (core/trace/collectives.h): psum_scatter, all_gather along any
// axis, all_to_all and ppermute. Each moves the axis it works on to the front, records one
// op on blocks along axis 0 (core/ir/ops.def) and moves the axis back.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/trace/collectives.h"

namespace fjit {
namespace {

// The replicas on the axis (axis_size: all of pmap's, or one axis of a mesh).
int replicas(const std::string& axis) { return axis_size(axis); }

int64_t axis_in(const char* name, const Tensor& x, int64_t axis, int64_t extra, const Loc& loc) {
  const int64_t rank = x.rank() + extra;
  if (axis < -rank || axis >= rank)
    detail::fail(name, {x}, fmt::format("axis {} is out of range for rank {}", axis, x.rank()), &loc);
  return axis < 0 ? axis + rank : axis;
}

// x with its axis `from` moved to position `to` (the others keep their order).
Tensor move_axis(const Tensor& x, int64_t from, int64_t to, const Loc& loc) {
  if (from == to) return x;
  Axes perm;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != from) perm.push_back(i);
  perm.insert(perm.begin() + to, from);
  return transpose(x, perm, loc);
}

void require_multiple(const char* name, const Tensor& x, int64_t axis, const std::string& mesh_axis,
                      const Loc& loc) {
  const int n = replicas(mesh_axis);
  if (x.shape()[axis] % n != 0)
    detail::fail(name, {x}, fmt::format("dimension {} (size {}) is not a multiple of the {} replicas",
                                        axis, x.shape()[axis], n), &loc);
}

// Consecutive runs of tensors of one dtype within bucket_bytes (at least one tensor each),
// as [begin, end) pairs: psum's buckets (collectives.cc).
std::vector<std::pair<size_t, size_t>> buckets(const std::vector<Tensor>& xs, int64_t bucket_bytes) {
  auto bytes_of = [](const Tensor& t) { return t.size() * dtype_size(t.dtype()); };
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < xs.size();) {
    size_t j = i + 1;
    int64_t bytes = bytes_of(xs[i]);
    while (j < xs.size() && xs[j].dtype() == xs[i].dtype() && bytes + bytes_of(xs[j]) <= bucket_bytes) {
      bytes += bytes_of(xs[j]);
      ++j;
    }
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}

int64_t bucket_bytes() {
  const TraceContext* ctx = TraceContext::current();
  return ctx != nullptr ? ctx->options.fusion_bytes : TraceOptions{}.fusion_bytes;
}

std::vector<Tensor> leaves_of(const TensorDict& xs, const char* name, bool split, const std::string& axis,
                              const Loc& loc) {
  std::vector<Tensor> v;
  for (const auto& kv : xs) {
    if (kv.second.rank() == 0) detail::fail(name, {kv.second}, "needs tensors of rank >= 1 ('" + kv.first + "')", &loc);
    if (split) require_multiple(name, kv.second, 0, axis, loc);
    v.push_back(kv.second);
  }
  return v;
}

TensorDict dict_of(const TensorDict& like, const std::vector<Tensor>& v) {
  TensorDict out;
  for (size_t i = 0; i < v.size(); ++i) out.set(like.name(i), v[i]);
  return out;
}

Shape with_rows(Shape s, int64_t rows) {
  s[0] = rows;
  return s;
}

}  // namespace

namespace detail {

Tensor reduce_scatter0(const Tensor& x, ReduceOp op, const std::string& axis, const Loc& loc) {
  Shape s = x.shape();
  s[0] /= replicas(axis);
  return collective("psum_scatter", Op::ReduceScatter, x, op, axis, {x.dtype(), s}, loc);
}

Tensor all_to_all0(const Tensor& x, const std::string& axis, const Loc& loc) {
  return collective("all_to_all", Op::AllToAll, x, ReduceOp::sum, axis, {}, loc);
}

Tensor ppermute0(const Tensor& x, const std::string& axis, std::vector<int64_t> to, const Loc& loc) {
  return collective("ppermute", Op::Permute, x, ReduceOp::sum, axis, {}, loc, std::move(to));
}

}  // namespace detail

Tensor psum_scatter(const Tensor& x, const std::string& axis, int64_t scatter_dimension, bool tiled, Loc loc) {
  detail::require_axis("psum_scatter", axis, loc);
  if (!x.defined() || x.rank() == 0) detail::fail("psum_scatter", {x}, "needs a tensor of rank >= 1", &loc);
  const int64_t d = axis_in("psum_scatter", x, scatter_dimension, 0, loc);
  require_multiple("psum_scatter", x, d, axis, loc);
  if (!tiled && x.shape()[d] != replicas(axis))
    detail::fail("psum_scatter", {x}, fmt::format("untiled: dimension {} (size {}) must equal the {} replicas "
                                                  "(tiled=true keeps it, shrunk)", d, x.shape()[d], replicas(axis)), &loc);
  Tensor r = move_axis(detail::reduce_scatter0(move_axis(x, d, 0, loc), ReduceOp::sum, axis, loc), 0, d, loc);
  return tiled ? r : squeeze(r, {d}, loc);
}

Tensor all_gather(const Tensor& x, const std::string& axis, int64_t gather_axis, bool tiled, Loc loc) {
  detail::require_axis("all_gather", axis, loc);
  if (!x.defined()) detail::fail("all_gather", {x}, "needs a tensor", &loc);
  const int64_t d = axis_in("all_gather", x, gather_axis, tiled ? 0 : 1, loc);
  if (tiled && d == 0) return all_gather(x, axis, loc);
  if (tiled) return move_axis(all_gather(move_axis(x, d, 0, loc), axis, loc), 0, d, loc);
  // Stacked: every replica's x as one row of a new leading axis, moved to d.
  Tensor one = reshape(x, [&] { Shape s = x.shape(); s.insert(s.begin(), 1); return s; }(), loc);
  Shape s = x.shape();
  s.insert(s.begin(), replicas(axis));
  Tensor g = detail::collective("all_gather", Op::AllGather, one, ReduceOp::sum, axis, {x.dtype(), s}, loc);
  return move_axis(g, 0, d, loc);
}

Tensor all_to_all(const Tensor& x, const std::string& axis, int64_t split_axis, int64_t concat_axis, bool tiled,
                  Loc loc) {
  detail::require_axis("all_to_all", axis, loc);
  if (!x.defined() || x.rank() == 0) detail::fail("all_to_all", {x}, "needs a tensor of rank >= 1", &loc);
  const int n = replicas(axis);
  const int64_t a = axis_in("all_to_all", x, split_axis, 0, loc);
  const int64_t c = axis_in("all_to_all", x, concat_axis, 0, loc);
  require_multiple("all_to_all", x, a, axis, loc);
  Tensor z = detail::all_to_all0(move_axis(x, a, 0, loc), axis, loc);  // block j: replica j's for me
  if (!tiled) {
    if (x.shape()[a] != n)
      detail::fail("all_to_all", {x}, fmt::format("untiled: split axis {} (size {}) must equal the {} replicas",
                                                  a, x.shape()[a], n), &loc);
    return move_axis(z, 0, c, loc);  // np.insert(np.delete(x.shape, a), c, n)
  }
  // [N, S/N, rest] -> [N, chunk] -> chunk with N just before axis c -> merged into axis c.
  Shape blocks = z.shape();
  blocks[0] = x.shape()[a] / n;
  blocks.insert(blocks.begin(), n);
  Tensor w = move_axis(move_axis(reshape(z, blocks, loc), 1, a + 1, loc), 0, c, loc);
  Shape out = x.shape();
  out[a] /= n;
  out[c] *= n;
  return reshape(w, out, loc);
}

Tensor ppermute(const Tensor& x, const std::string& axis, const std::vector<std::pair<int, int>>& perm, Loc loc) {
  detail::require_axis("ppermute", axis, loc);
  if (!x.defined()) detail::fail("ppermute", {x}, "needs a tensor", &loc);
  const int n = replicas(axis);
  std::vector<int64_t> to(n, -1);
  std::vector<bool> received(n, false);
  for (const auto& [src, dst] : perm) {
    if (src < 0 || src >= n || dst < 0 || dst >= n)
      detail::fail("ppermute", {x}, fmt::format("pair ({}, {}) names a replica outside 0..{}", src, dst, n - 1), &loc);
    if (to[src] >= 0 || received[dst])
      detail::fail("ppermute", {x}, fmt::format("pair ({}, {}): replica {} already sends or {} already receives",
                                                src, dst, src, dst), &loc);
    to[src] = dst;
    received[dst] = true;
  }
  return detail::ppermute0(x, axis, std::move(to), loc);
}

// Bucketed dict forms. A reduce-scatter bucket lays its tensors side by side per block,
// [N, m1 + m2 + ...], so that block r of the bucket holds block r of every tensor.
TensorDict psum_scatter(const TensorDict& xs, const std::string& axis, Loc loc) {
  detail::require_axis("psum_scatter", axis, loc);
  const std::vector<Tensor> v = leaves_of(xs, "psum_scatter", true, axis, loc);
  const int n = replicas(axis);
  std::vector<Tensor> out(v.size());
  for (const auto& [i, j] : buckets(v, bucket_bytes())) {
    if (j == i + 1) {
      out[i] = detail::reduce_scatter0(v[i], ReduceOp::sum, axis, loc);
      continue;
    }
    std::vector<Tensor> cols;
    int64_t m = 0;
    for (size_t k = i; k < j; ++k) {
      cols.push_back(reshape(v[k], {n, v[k].size() / n}, loc));
      m += v[k].size() / n;
    }
    Tensor mine = detail::reduce_scatter0(reshape(concat(cols, 1, loc), {n * m}, loc), ReduceOp::sum, axis, loc);
    int64_t off = 0;
    for (size_t k = i; k < j; ++k) {
      const int64_t mk = v[k].size() / n;
      out[k] = reshape(slice(mine, {off}, {off + mk}, {1}, loc), with_rows(v[k].shape(), v[k].shape()[0] / n), loc);
      off += mk;
    }
  }
  return dict_of(xs, out);
}

TensorDict all_gather(const TensorDict& xs, const std::string& axis, Loc loc) {
  detail::require_axis("all_gather", axis, loc);
  const std::vector<Tensor> v = leaves_of(xs, "all_gather", false, axis, loc);
  const int n = replicas(axis);
  std::vector<Tensor> out(v.size());
  for (const auto& [i, j] : buckets(v, bucket_bytes())) {
    if (j == i + 1) {
      out[i] = all_gather(v[i], axis, loc);
      continue;
    }
    std::vector<Tensor> flat;
    int64_t m = 0;
    for (size_t k = i; k < j; ++k) {
      flat.push_back(reshape(v[k], {v[k].size()}, loc));
      m += v[k].size();
    }
    Tensor all = reshape(detail::collective("all_gather", Op::AllGather, concat(flat, 0, loc), ReduceOp::sum, axis,
                                            {v[i].dtype(), {n * m}}, loc),
                         {n, m}, loc);
    int64_t off = 0;
    for (size_t k = i; k < j; ++k) {
      const int64_t mk = v[k].size();
      out[k] = reshape(slice(all, {0, off}, {n, off + mk}, {1, 1}, loc), with_rows(v[k].shape(), v[k].shape()[0] * n),
                       loc);
      off += mk;
    }
  }
  return dict_of(xs, out);
}

TensorDict ppermute(const TensorDict& xs, const std::string& axis, const std::vector<std::pair<int, int>>& perm,
                    Loc loc) {
  detail::require_axis("ppermute", axis, loc);
  std::vector<Tensor> v;
  for (const auto& kv : xs) v.push_back(kv.second);
  std::vector<Tensor> out(v.size());
  for (const auto& [i, j] : buckets(v, bucket_bytes())) {
    if (j == i + 1) {
      out[i] = ppermute(v[i], axis, perm, loc);
      continue;
    }
    std::vector<Tensor> flat;
    for (size_t k = i; k < j; ++k) flat.push_back(reshape(v[k], {v[k].size()}, loc));
    Tensor moved = ppermute(concat(flat, 0, loc), axis, perm, loc);
    int64_t off = 0;
    for (size_t k = i; k < j; ++k) {
      out[k] = reshape(slice(moved, {off}, {off + v[k].size()}, {1}, loc), v[k].shape(), loc);
      off += v[k].size();
    }
  }
  return dict_of(xs, out);
}

}  // namespace fjit
