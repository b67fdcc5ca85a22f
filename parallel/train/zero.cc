#include "parallel/train/zero.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "checks/check.h"
#include "core/autodiff/recompute.h"
#include "core/trace/collectives.h"

namespace fjit::training {

int64_t zero_shard_size(int64_t numel, int replicas) {
  if (replicas < 1) throw std::invalid_argument("zero_shard_size: replicas must be >= 1");
  return (numel + replicas - 1) / replicas;
}

ArrayDict zero_init_state(const ArrayDict& params, const Mesh& mesh) {
  ArrayDict state;
  for (const char* moment : {"m.", "v."})
    for (const auto& [name, p] : params)
      state.set(moment + name, Array::zeros(p.dtype(), {mesh.local_size() * zero_shard_size(p.size(), mesh.size())}));
  state.set("step", Array::scalar<int32_t>(0));
  return state;
}

int64_t zero_state_bytes_per_replica(const ArrayDict& params, int replicas) {
  int64_t bytes = static_cast<int64_t>(sizeof(int32_t));  // the step counter
  for (const auto& [name, p] : params)
    bytes += 2 * zero_shard_size(p.size(), replicas) * static_cast<int64_t>(dtype_size(p.dtype()));
  return bytes;
}

namespace {

// Replica `me`'s block [me k, (me + 1) k) of x's elements, zero-padded to N k.
Tensor own_slice(const Tensor& x, int n, const Tensor& me) {
  const int64_t k = zero_shard_size(x.size(), n);
  Tensor flat = reshape(x, {x.size()});
  if (n * k > x.size()) flat = concat({flat, full(x.dtype(), {n * k - x.size()}, 0.0)}, 0);
  return reshape(take(reshape(flat, {n, k}), reshape(me, {1}), 0), {k});
}

// Every replica's slices of the parameters put back whole: one all-gather per dtype of the
// slices packed back to back, then each parameter's N blocks unpadded and reshaped.
TensorDict gather_slices(const TensorDict& slices, const std::vector<ZeroParamShape>& like, int n,
                         const std::string& axis) {
  const Loc loc = Loc::current();
  detail::require_axis("zero all_gather", axis, loc);
  std::map<DType, std::vector<std::string>> by_dtype;
  for (const auto& [name, s] : slices) by_dtype[s.dtype()].push_back(name);
  TensorDict out;
  for (const auto& [dtype, names] : by_dtype) {
    std::vector<Tensor> flat;
    int64_t m = 0;
    for (const std::string& name : names) {
      flat.push_back(slices.at(name));
      m += slices.at(name).size();
    }
    Tensor packed = flat.size() == 1 ? flat[0] : concat(flat, 0, loc);
    Tensor all = reshape(detail::collective("all_gather", Op::AllGather, packed, ReduceOp::sum, axis,
                                            {dtype, {n * m}}, loc),
                         {n, m}, loc);
    int64_t off = 0;
    for (const std::string& name : names) {
      const auto it = std::find_if(like.begin(), like.end(), [&](const ZeroParamShape& s) { return s.name == name; });
      if (it == like.end()) throw std::invalid_argument(fmt::format("zero all_gather: no shape for '{}'", name));
      const int64_t numel = num_elements(it->shape);
      const int64_t k = slices.at(name).size();
      Tensor blocks = reshape(slice(all, {0, off}, {n, off + k}, {1, 1}, loc), {n * k}, loc);
      out.set(name, reshape(slice(blocks, {0}, {numel}, {1}, loc), it->shape, loc));
      off += k;
    }
  }
  TensorDict ordered;  // the parameters' order
  for (const ZeroParamShape& p : like) ordered.set(p.name, out.at(p.name));
  return ordered;
}

std::vector<ZeroParamShape> shapes_of(const TensorDict& params) {
  std::vector<ZeroParamShape> out;
  for (const auto& [name, p] : params) out.push_back({name, p.dtype(), p.shape()});
  return out;
}

// Sum of the squares of `g`, accumulated in `acc`: global_norm's term for one tensor.
Tensor squares(const Tensor& g, DType acc) { return cast(sum(square(g), {}, false), acc); }

// The global norm of the averaged gradient whose slices (this replica's blocks) are `g_slices`.
// With `exact`, each gradient is all-gathered whole in turn (one all-gather per parameter, its
// whole value freed after its sum of squares) and summed as global_norm sums the replicated
// step's: the same bits. Otherwise, each replica's sum of squares of its blocks is summed over
// the replicas (the padding adds 0): the same value up to the order of the additions.
Tensor sharded_norm(const TensorDict& g_slices, const std::vector<ZeroParamShape>& shapes, int n,
                    const std::string& axis, bool exact) {
  const Loc loc = Loc::current();
  bool all_f64 = true;
  for (const auto& [name, g] : g_slices) all_f64 = all_f64 && g.dtype() == DType::f64;
  const DType acc = all_f64 ? DType::f64 : DType::f32;
  Tensor total;
  for (const auto& [name, g] : g_slices) {
    Tensor s;
    if (exact) {
      const auto it = std::find_if(shapes.begin(), shapes.end(), [&](const ZeroParamShape& p) { return p.name == name; });
      Tensor all = detail::collective("all_gather", Op::AllGather, g, ReduceOp::sum, axis,
                                      {g.dtype(), {n * g.size()}}, loc);
      s = squares(reshape(slice(all, {0}, {num_elements(it->shape)}, {1}, loc), it->shape, loc), acc);
    } else {
      s = squares(g, acc);
    }
    total = total.defined() ? add(total, s) : s;
  }
  return exact ? sqrt(total) : sqrt(psum(total, axis));
}

// Stage 2's update of this replica's parameter slices from the gradients before averaging:
// {slices', state', norm}. With clip_norm > 0 the norm is exact (sharded_norm) and the slices
// are scaled as clip_by_global_norm scales the whole gradient (elementwise: the same bits).
std::tuple<TensorDict, TensorDict, Tensor> zero2_update_slices(
    const TensorDict& p_slices, const TensorDict& grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, const std::string& axis,
    const ZeroClip& clip) {
  const int n = TraceContext::current()->num_replicas;
  // pmean's operand (the gradient times the replica's mean weight), flat and zero-padded to
  // N k, reduce-scattered: each replica receives the sum's block it updates, the same bits as
  // that block of pmean(grads).
  TensorDict padded;
  for (const auto& [name, g] : grads) {
    const int64_t k = zero_shard_size(g.size(), n);
    Tensor flat = reshape(mul(g, detail::mean_scale(g.dtype())), {g.size()});
    if (n * k > g.size()) flat = concat({flat, full(g.dtype(), {n * k - g.size()}, 0.0)}, 0);
    padded.set(name, flat);
  }
  TensorDict g_slices = psum_scatter(padded, axis);
  const Tensor norm = sharded_norm(g_slices, shapes_of(grads), n, axis, clip.norm > 0);
  check(isfinite(norm) && norm < max_grad_norm,
        "global gradient norm {} is not finite or not below {}", norm,
        scalar(norm.dtype(), max_grad_norm));
  if (clip.norm > 0) {
    // clip_by_global_norm's scale, applied to the slices.
    const Tensor limit = scalar(norm.dtype(), clip.norm);
    const Tensor scale = where(gt(norm, limit), div(limit, maximum(norm, limit)), ones_like(norm));
    for (const std::string& name : g_slices.names())
      g_slices.set(name, mul(g_slices.at(name), cast(scale, g_slices.at(name).dtype())));
  }
  AdamW opt = optimizer;
  opt.lr = schedule(step);
  TensorDict ordered;  // the slices in the gradients' order
  for (const auto& [name, g] : g_slices) ordered.set(name, p_slices.at(name));
  auto [next_slices, next_state] = grouped_update(opt, clip.groups, ordered, g_slices, state, clip.pattern_names);
  return {next_slices, next_state, norm};
}

}  // namespace

std::tuple<TensorDict, TensorDict, Tensor> zero1_adamw_update_of_mean(
    const Params& params, const TensorDict& mean_grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, const std::string& axis,
    double clip_norm, const std::vector<ParamGroup>& groups, const std::vector<std::string>* pattern_names) {
  // The norm of the whole averaged gradient, and its clipping, as the replicated step does.
  Tensor norm;
  const TensorDict clipped = clip_norm > 0 ? clip_by_global_norm(mean_grads, clip_norm, &norm) : mean_grads;
  if (clip_norm <= 0) norm = global_norm(mean_grads);
  check(isfinite(norm) && norm < max_grad_norm,
        "global gradient norm {} is not finite or not below {}", norm,
        scalar(norm.dtype(), max_grad_norm));
  const int n = TraceContext::current()->num_replicas;
  const Tensor me = axis_index(axis);
  TensorDict p_slices, g_slices;
  for (const auto& [name, p] : params) {
    p_slices.set(name, own_slice(p, n, me));
    g_slices.set(name, own_slice(clipped.at(name), n, me));
  }
  AdamW opt = optimizer;
  opt.lr = schedule(step);
  auto [next_slices, next_state] = grouped_update(opt, groups, p_slices, g_slices, state, pattern_names);
  return {gather_slices(next_slices, shapes_of(params), n, axis), next_state, norm};
}

std::tuple<TensorDict, TensorDict, Tensor> zero2_adamw_update(
    const Params& params, const TensorDict& grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, const std::string& axis,
    const ZeroClip& clip) {
  const int n = TraceContext::current()->num_replicas;
  const Tensor me = axis_index(axis);
  TensorDict p_slices;
  for (const auto& [name, p] : params) p_slices.set(name, own_slice(p, n, me));
  auto [next_slices, next_state, norm] =
      zero2_update_slices(p_slices, grads, state, optimizer, schedule, step, max_grad_norm, axis, clip);
  return {gather_slices(next_slices, shapes_of(params), n, axis), next_state, norm};
}

namespace {

// One parameter made whole from this replica's shard: all-gathered, unpadded, reshaped.
Tensor gather_param(const Tensor& shard, const ZeroParamShape& p, int n, const std::string& axis) {
  const Loc loc = Loc::current();
  const int64_t numel = num_elements(p.shape), k = shard.size();
  Tensor all = detail::collective("all_gather", Op::AllGather, shard, ReduceOp::sum, axis, {p.dtype, {n * k}}, loc);
  if (n * k > numel) all = slice(all, {0}, {numel}, {1}, loc);
  return reshape(all, p.shape, loc);
}

}  // namespace

TensorDict zero3_gather_params(const TensorDict& shards, const std::vector<ZeroParamShape>& shapes,
                               const std::string& axis) {
  const int n = TraceContext::current()->num_replicas;
  detail::require_axis("zero3_gather_params", axis, Loc::current());
  TensorDict out;
  for (const ZeroParamShape& p : shapes) {
    const int64_t k = zero_shard_size(num_elements(p.shape), n);
    if (!shards.contains(p.name) || shards.at(p.name).shape() != Shape{k} || shards.at(p.name).dtype() != p.dtype)
      throw std::invalid_argument(fmt::format("zero3_gather_params: '{}' should be this replica's shard {} of {}, got {}",
                                              p.name, type_str(p.dtype, {k}), type_str(p.dtype, p.shape),
                                              shards.contains(p.name) ? type_str(shards.at(p.name).dtype(), shards.at(p.name).shape())
                                                                      : std::string("nothing")));
    const Tensor shard = shards.at(p.name);
    const Tensor whole = gather_param(shard, p, n, axis);
    out.set(p.name, recompute_in_backward(whole, [shard, p, n, axis] { return gather_param(shard, p, n, axis); }));
  }
  return out;
}

std::tuple<TensorDict, TensorDict, Tensor> zero3_adamw_update(
    const Params& shards, const TensorDict& grads, const Params& state, const AdamW& optimizer,
    const Schedule& schedule, const Tensor& step, double max_grad_norm, const std::string& axis,
    const ZeroClip& clip) {
  return zero2_update_slices(shards, grads, state, optimizer, schedule, step, max_grad_norm, axis, clip);
}

namespace {

// The parameter a moment entry ("m.<name>", "v.<name>") belongs to; throws for an entry that
// is neither a moment of a parameter of `params` nor a scalar.
const Array& moment_param(const std::string& entry, const ArrayDict& params, const char* who) {
  if (entry.size() > 2 && (entry.starts_with("m.") || entry.starts_with("v.")))
    if (params.contains(entry.substr(2))) return params.at(entry.substr(2));
  throw std::invalid_argument(fmt::format("{}: state entry '{}' is not a moment of a parameter", who, entry));
}

}  // namespace

ArrayDict zero_gather_state(const ArrayDict& local, const ArrayDict& params, const Mesh& mesh) {
  const int n = mesh.size(), local_n = mesh.local_size();
  Communicator* pc = mesh.process_comm();
  if (pc != nullptr && local_n * mesh.processes() != n)
    throw std::invalid_argument(fmt::format("zero_gather_state: {} replicas over {} processes of {} each: "
                                            "the processes must hold equal numbers of replicas",
                                            n, mesh.processes(), local_n));
  ArrayDict whole;
  for (const auto& [name, a] : local) {
    if (a.rank() == 0) {
      whole.set(name, a);
      continue;
    }
    const Array& p = moment_param(name, params, "zero_gather_state");
    const int64_t k = zero_shard_size(p.size(), n);
    if (a.dtype() != p.dtype() || a.shape() != Shape{local_n * k})
      throw std::invalid_argument(fmt::format("zero_gather_state: '{}' is {}, the shards of {} replicas of {} "
                                              "for this process's {} replicas would be {}", name,
                                              type_str(a.dtype(), a.shape()), n, type_str(p.dtype(), p.shape()),
                                              local_n, type_str(p.dtype(), {local_n * k})));
    Array all(p.dtype(), {n * k});
    if (pc != nullptr)
      pc->all_gather(a.raw(), all.raw(), a.nbytes());
    else
      std::memcpy(all.raw(), a.raw(), a.nbytes());
    Array w(p.dtype(), p.shape());
    std::memcpy(w.raw(), all.raw(), w.nbytes());  // the padding past numel dropped
    whole.set(name, std::move(w));
  }
  return whole;
}

ArrayDict zero_shard_state(const ArrayDict& whole, const ArrayDict& params, const Mesh& mesh) {
  const int n = mesh.size(), local_n = mesh.local_size(), first = mesh.first_replica();
  ArrayDict out;
  for (const auto& [name, w] : whole) {
    if (w.rank() == 0) {
      out.set(name, w);
      continue;
    }
    const Array& p = moment_param(name, params, "zero_shard_state");
    if (w.dtype() != p.dtype() || w.shape() != p.shape())
      throw std::invalid_argument(fmt::format("zero_shard_state: '{}' is {}, its parameter {}", name,
                                              type_str(w.dtype(), w.shape()), type_str(p.dtype(), p.shape())));
    const int64_t k = zero_shard_size(p.size(), n);
    const size_t es = dtype_size(p.dtype());
    Array s = Array::zeros(p.dtype(), {local_n * k});
    const int64_t begin = std::min<int64_t>(int64_t{first} * k, w.size());
    const int64_t end = std::min<int64_t>(int64_t{first + local_n} * k, w.size());
    std::memcpy(s.raw(), static_cast<const char*>(w.raw()) + begin * es, static_cast<size_t>(end - begin) * es);
    out.set(name, std::move(s));
  }
  return out;
}

std::vector<ZeroParamShape> zero_param_shapes(const ArrayDict& params) {
  std::vector<ZeroParamShape> out;
  for (const auto& [name, p] : params) out.push_back({name, p.dtype(), p.shape()});
  return out;
}

ArrayDict zero_shard_params(const ArrayDict& whole, const Mesh& mesh) {
  const int n = mesh.size(), local_n = mesh.local_size(), first = mesh.first_replica();
  ArrayDict out;
  for (const auto& [name, w] : whole) {
    const int64_t k = zero_shard_size(w.size(), n);
    const size_t es = dtype_size(w.dtype());
    Array s = Array::zeros(w.dtype(), {local_n * k});
    const int64_t begin = std::min<int64_t>(int64_t{first} * k, w.size());
    const int64_t end = std::min<int64_t>(int64_t{first + local_n} * k, w.size());
    std::memcpy(s.raw(), static_cast<const char*>(w.raw()) + begin * es, static_cast<size_t>(end - begin) * es);
    out.set(name, std::move(s));
  }
  return out;
}

ArrayDict zero_gather_params(const ArrayDict& local, const std::vector<ZeroParamShape>& shapes, const Mesh& mesh) {
  const int n = mesh.size(), local_n = mesh.local_size();
  Communicator* pc = mesh.process_comm();
  if (pc != nullptr && local_n * mesh.processes() != n)
    throw std::invalid_argument(fmt::format("zero_gather_params: {} replicas over {} processes of {} each: "
                                            "the processes must hold equal numbers of replicas",
                                            n, mesh.processes(), local_n));
  ArrayDict whole;
  for (const ZeroParamShape& p : shapes) {
    const int64_t k = zero_shard_size(num_elements(p.shape), n);
    if (!local.contains(p.name) || local.at(p.name).dtype() != p.dtype || local.at(p.name).shape() != Shape{local_n * k})
      throw std::invalid_argument(fmt::format("zero_gather_params: '{}' should be {}, the shards of {} for this "
                                              "process's {} of {} replicas", p.name, type_str(p.dtype, {local_n * k}),
                                              type_str(p.dtype, p.shape), local_n, n));
    const Array& a = local.at(p.name);
    Array all(p.dtype, {n * k});
    if (pc != nullptr)
      pc->all_gather(a.raw(), all.raw(), a.nbytes());
    else
      std::memcpy(all.raw(), a.raw(), a.nbytes());
    Array w(p.dtype, p.shape);
    std::memcpy(w.raw(), all.raw(), w.nbytes());  // the padding past numel dropped
    whole.set(p.name, std::move(w));
  }
  return whole;
}

ArrayDict zero_local_state(const ArrayDict& first, const std::vector<const std::vector<Array>*>& others,
                           size_t offset) {
  if (others.empty()) return first;
  ArrayDict out;
  for (size_t i = 0; i < first.size(); ++i) {
    const Array& a = first.value(i);
    if (a.rank() == 0) {
      out.set(first.name(i), a);
      continue;
    }
    const int64_t k = a.shape()[0];
    Array whole(a.dtype(), {k * static_cast<int64_t>(1 + others.size())});
    const size_t bytes = a.nbytes();
    std::memcpy(whole.raw(), a.raw(), bytes);
    for (size_t r = 0; r < others.size(); ++r) {
      const Array& s = others[r]->at(offset + i);
      if (s.shape() != a.shape() || s.dtype() != a.dtype())
        throw std::invalid_argument("zero_local_state: replica shards of '" + first.name(i) + "' differ in shape");
      std::memcpy(static_cast<char*>(whole.raw()) + (r + 1) * bytes, s.raw(), bytes);
    }
    out.set(first.name(i), std::move(whole));
  }
  return out;
}

}  // namespace fjit::training
