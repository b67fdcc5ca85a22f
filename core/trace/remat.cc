#include "core/trace/remat.h"

#include "core/trace/region_trace.h"

namespace fjit::detail {

std::vector<Tensor> remat_leaves(const LeafFn& fn, const std::vector<Tensor>& args, const Loc& loc,
                                 const Site* site) {
  TraceContext* ctx = TraceContext::current();
  if (!ctx) fail("remat", {}, "called outside a traced function", &loc);
  if (args.empty()) fail("remat", {}, "needs at least one Tensor argument to recompute from", &loc);
  for (const Tensor& t : args)
    if (!t.defined() || t.context() != ctx || t.trace_id() != ctx->trace_id())
      fail("remat", {}, "an argument is an undefined Tensor or one of another trace", &loc);
  std::vector<ValueType> params;
  for (const Tensor& t : args) params.push_back({t.dtype(), t.shape()});
  TracedRegion t = trace_region("remat", params, fn, loc);
  // The graph's parameters are [args..., captured...]: the op's inputs, in that order.
  std::vector<Tensor> inputs = args;
  inputs.insert(inputs.end(), t.captured.begin(), t.captured.end());
  auto region = std::make_shared<Region>();
  region->graphs = {t.graph};
  region->num_carry = static_cast<int>(args.size());
  for (int o : t.graph->outputs) region->outputs.push_back({t.graph->node(o).dtype, t.graph->node(o).shape});
  region->site = site ? *site : Site::from(loc);
  region->finish();
  Attrs a;
  a.region = region;
  if (region->has_effects) a.index = ctx->next_effect_id();
  const Tensor node = build("remat", Op::Remat, inputs, std::move(a), {}, &loc);
  std::vector<Tensor> out;
  for (size_t k = 0; k < region->outputs.size(); ++k) out.push_back(control_output(node, static_cast<int>(k)));
  return out;
}

}  // namespace fjit::detail
