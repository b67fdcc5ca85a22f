// vmap's edges: the arguments' batch axes moved first, one example traced, the example graph
// batched (core/autodiff/batching.cc), the results' batch axes moved to out_axes.
#include "core/autodiff/vmap.h"

#include <fmt/format.h>

#include "core/autodiff/batching.h"
#include "core/trace/region_trace.h"

namespace fjit::detail {

namespace {
[[noreturn]] void vmap_fail(const std::string& what, const Loc& loc) {
  throw TraceError(fmt::format("fjit: vmap: {} (at {})", what, call_site(&loc)));
}
}  // namespace

std::vector<Tensor> vmap_flat(const VmapFn& fn, const std::vector<VmapLeaf>& leaves,
                              const std::function<std::vector<int>(size_t)>& out_axes_of,
                              const Loc& loc) {
  if (!TraceContext::current()) vmap_fail("called outside a traced function (jit, grad or pmap)", loc);
  int64_t size = -1;
  std::string first;
  std::vector<Tensor> moved(leaves.size());
  std::vector<ValueType> example_types;
  std::vector<size_t> batched;
  for (size_t k = 0; k < leaves.size(); ++k) {
    const VmapLeaf& l = leaves[k];
    if (!l.t.defined()) vmap_fail(fmt::format("argument {} is an undefined Tensor", l.name), loc);
    if (l.axis == kUnbatched) continue;
    if (l.axis < 0 || l.axis >= l.t.rank())
      vmap_fail(fmt::format("in_axis {} is out of range for argument {} of type {}", l.axis, l.name,
                            l.t.type_string()), loc);
    const int64_t b = l.t.dim(l.axis);
    if (size < 0) {
      size = b;
      first = fmt::format("{} {} (axis {})", l.name, l.t.type_string(), l.axis);
    } else if (b != size) {
      vmap_fail(fmt::format("batch sizes differ: {} has {}, but {} {} (axis {}) has {}", first, size,
                            l.name, l.t.type_string(), l.axis, b), loc);
    }
    moved[k] = batching::move_axis(l.t, l.axis, 0);
    const Shape s = moved[k].shape();
    example_types.push_back({moved[k].dtype(), Shape(s.begin() + 1, s.end())});
    batched.push_back(k);
  }
  if (batched.empty()) vmap_fail("no argument is batched (every in_axis is kUnbatched)", loc);

  TracedRegion region = trace_region("vmap", example_types, [&](const std::vector<Tensor>& ph) {
    std::vector<Tensor> args;
    for (const VmapLeaf& l : leaves) args.push_back(l.t);
    for (size_t i = 0; i < batched.size(); ++i) args[batched[i]] = ph[i];
    return fn(args);
  }, loc);

  std::vector<batching::Batched> params;
  for (size_t k : batched) params.push_back({moved[k], true, {}});
  for (const Tensor& c : region.captured) params.push_back({c, false, {}});
  const std::vector<batching::Batched> outs = batching::batch_graph(*region.graph, params, size);

  const std::vector<int> axes = out_axes_of(outs.size());
  std::vector<Tensor> result;
  for (size_t k = 0; k < outs.size(); ++k) {
    const batching::Batched& o = outs[k];
    if (axes[k] == kUnbatched) {
      if (o.batched)
        vmap_fail(fmt::format("result {} ({}) depends on the batch, but its out_axis is kUnbatched", k,
                              o.t.type_string()), loc);
      result.push_back(o.t);
      continue;
    }
    const Tensor t = batching::materialize(o, size);
    if (axes[k] < 0 || axes[k] >= t.rank())
      vmap_fail(fmt::format("out_axis {} is out of range for result {} of batched type {}", axes[k], k,
                            t.type_string()), loc);
    result.push_back(batching::move_axis(t, 0, axes[k]));
  }
  return result;
}

}  // namespace fjit::detail
