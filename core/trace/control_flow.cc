#include "core/trace/control_flow.h"

#include "core/trace/region_trace.h"

namespace fjit::detail {
namespace {

std::string types_of(const std::vector<ValueType>& ts) {
  std::string s = "(";
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + type_str(ts[i].dtype, ts[i].shape);
  return s + ")";
}

std::vector<ValueType> types_of(const std::vector<Tensor>& ts) {
  std::vector<ValueType> v;
  for (const Tensor& t : ts) v.push_back({t.dtype(), t.shape()});
  return v;
}

std::vector<ValueType> output_types(const Graph& g) {
  std::vector<ValueType> v;
  for (int o : g.outputs) v.push_back({g.node(o).dtype, g.node(o).shape});
  return v;
}

void require_leaves(const char* api, const std::vector<Tensor>& all, const Loc& loc) {
  TraceContext* ctx = TraceContext::current();
  if (!ctx) fail(api, {}, "called outside a traced function", &loc);
  for (const Tensor& t : all)
    if (!t.defined() || t.context() != ctx || t.trace_id() != ctx->trace_id())
      fail(api, {}, "an operand is an undefined Tensor or one of another trace", &loc);
}

std::vector<Tensor> concat_leaves(std::vector<Tensor> a, const std::vector<Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<Tensor> outputs_of(const Tensor& node, int first, int count) {
  std::vector<Tensor> v;
  for (int k = first; k < first + count; ++k) v.push_back(control_output(node, k));
  return v;
}

}  // namespace

ScanLeaves scan_leaves(const char* api, const ScanBody& body, const std::vector<Tensor>& init,
                       const std::vector<Tensor>& xs, const Loc& loc, bool reverse, const Site* site) {
  const std::vector<Tensor> operands = concat_leaves(init, xs);
  require_leaves(api, operands, loc);
  if (xs.empty()) fail(api, operands, "needs at least one xs leaf to iterate over", &loc);
  for (const Tensor& x : xs)
    if (x.rank() < 1) fail(api, operands, "every xs leaf needs a leading axis to iterate over", &loc);
  const int64_t length = xs[0].shape()[0];
  for (const Tensor& x : xs)
    if (x.shape()[0] != length)
      fail(api, operands, "the xs leaves disagree on their leading extent (" + std::to_string(length) +
           " vs " + std::to_string(x.shape()[0]) + ")", &loc);
  const int nc = static_cast<int>(init.size()), nx = static_cast<int>(xs.size());
  std::vector<ValueType> params = types_of(init);
  for (const Tensor& x : xs) {
    Shape row = x.shape();
    row.erase(row.begin());
    params.push_back({x.dtype(), row});
  }
  TracedRegion tr = trace_region(api, params, [&](const std::vector<Tensor>& ph) {
    ScanStep step = body({ph.begin(), ph.begin() + nc}, {ph.begin() + nc, ph.end()});
    if (static_cast<int>(step.carry.size()) != nc)
      fail(api, operands, "the body returns " + std::to_string(step.carry.size()) + " carry leaves for " +
           std::to_string(nc) + " carry leaves in", &loc);
    for (int j = 0; j < nc; ++j)
      if (step.carry[j].defined() &&
          (step.carry[j].dtype() != params[j].dtype || step.carry[j].shape() != params[j].shape))
        fail(api, operands, "the body's carry output " + std::to_string(j) + " is " +
             step.carry[j].type_string() + " but its carry input is " +
             type_str(params[j].dtype, params[j].shape) + " (a carry keeps its type)", &loc);
    return concat_leaves(step.carry, step.ys);
  }, loc);
  auto region = std::make_shared<Region>();
  region->graphs = {tr.graph};
  region->num_carry = nc;
  region->num_xs = nx;
  region->length = length;
  region->reverse = reverse;
  region->loop = api;
  region->site = site ? *site : Site::from(loc);
  const std::vector<ValueType> body_out = output_types(*tr.graph);
  const int ny = static_cast<int>(body_out.size()) - nc;
  for (int j = 0; j < nc; ++j) region->outputs.push_back(body_out[j]);
  auto stacked = [&](ValueType t) {
    t.shape.insert(t.shape.begin(), length);
    return t;
  };
  for (int k = 0; k < ny; ++k) region->outputs.push_back(stacked(body_out[nc + k]));
  for (int j = 0; j < nc; ++j) region->outputs.push_back(stacked(body_out[j]));
  region->finish();
  tag_loop_sites(tr.sites, api, region->site);
  Attrs a;
  a.region = region;
  if (region->has_effects) a.index = TraceContext::current()->next_effect_id();
  const Tensor node = build(api, Op::Scan, concat_leaves(operands, tr.captured), std::move(a), {}, &loc);
  return {outputs_of(node, 0, nc), outputs_of(node, nc, ny)};
}

namespace {

// The guard sites of a while_loop about to be built (none with checks off): sets the region's
// trip limit and site ids (the next ids of the trace), and returns the sites to record once the
// node exists.
std::vector<CheckSite> while_guard_sites(const TraceContext& ctx, Region& region, int64_t max_trips) {
  std::vector<CheckSite> out;
  if (ctx.options.checks == CheckMode::off) return out;
  const int64_t limit = max_trips >= 0 ? max_trips : ctx.options.while_max_trips;
  auto add = [&](CheckKind kind, const char* format) {
    CheckSite site;
    site.kind = kind;
    site.format = format;
    site.num_values = 2;
    site.loop = "while_loop";
    site.loop_site = region.site;
    out.push_back(std::move(site));
    return static_cast<int>(ctx.check_sites.size() + out.size() - 1);
  };
  if (limit > 0) {
    region.max_trips = limit;
    region.trip_site = add(CheckKind::loop_trip_limit,
                           "while_loop stopped at its trip limit of {:.0f} iterations; its carry "
                           "then held {:.0f} non-finite values");
  }
  if (ctx.options.step_deadline)
    region.timeout_site = add(CheckKind::step_timeout,
                              "while_loop stopped: the step ran past its deadline of {:g} s; its "
                              "carry then held {:.0f} non-finite values");
  return out;
}

}  // namespace

std::vector<Tensor> while_loop_leaves(const LeafFn& cond_fn, const LeafFn& body_fn,
                                      const std::vector<Tensor>& init, const Loc& loc,
                                      int64_t max_trips) {
  const char* api = "while_loop";
  require_leaves(api, init, loc);
  if (init.empty()) fail(api, init, "needs at least one carry leaf", &loc);
  const std::vector<ValueType> params = types_of(init);
  TracedRegion c = trace_region(api, params, cond_fn, loc);
  const std::vector<ValueType> cout = output_types(*c.graph);
  if (cout.size() != 1 || cout[0].dtype != DType::boolean || !cout[0].shape.empty())
    fail(api, init, "cond_fn must return a bool scalar, got " + types_of(cout), &loc);
  TracedRegion b = trace_region(api, params, body_fn, loc);
  const std::vector<ValueType> bout = output_types(*b.graph);
  bool same = bout.size() == params.size();
  for (size_t k = 0; same && k < bout.size(); ++k)
    same = bout[k].dtype == params[k].dtype && bout[k].shape == params[k].shape;
  if (!same)
    fail(api, init, "body_fn returns " + types_of(bout) + " for the carry " + types_of(params) +
         " (a carry keeps its structure and types)", &loc);
  // Both take [carry..., cond_fn's captures..., body_fn's captures...].
  const std::vector<Tensor> inputs = concat_leaves(concat_leaves(init, c.captured), b.captured);
  const std::vector<ValueType> in_types = types_of(inputs);
  const size_t n = init.size(), nc = c.captured.size(), nb = b.captured.size();
  std::vector<int> cmap, bmap;
  for (size_t k = 0; k < n + nc; ++k) cmap.push_back(static_cast<int>(k));
  for (size_t k = 0; k < n; ++k) bmap.push_back(static_cast<int>(k));
  for (size_t k = 0; k < nb; ++k) bmap.push_back(static_cast<int>(n + nc + k));
  auto region = std::make_shared<Region>();
  region->graphs = {remap_params(*c.graph, in_types, cmap), remap_params(*b.graph, in_types, bmap)};
  region->num_carry = static_cast<int>(n);
  region->outputs = params;
  region->loop = api;
  region->site = Site::from(loc);
  region->finish();
  std::vector<int> sites = c.sites;
  sites.insert(sites.end(), b.sites.begin(), b.sites.end());
  tag_loop_sites(sites, api, region->site);
  TraceContext* ctx = TraceContext::current();
  const std::vector<CheckSite> guards = while_guard_sites(*ctx, *region, max_trips);
  if (!guards.empty()) region->has_effects = true;  // a guarded loop is never merged with another
  Attrs a;
  a.region = region;
  if (region->has_effects) a.index = ctx->next_effect_id();
  const Tensor node = build(api, Op::WhileLoop, inputs, std::move(a), {}, &loc);
  for (CheckSite site : guards) {
    site.site = node.node().site;  // the loop's call site and, with checks on, its stack
    ctx->check_sites.push_back(std::move(site));
  }
  return outputs_of(node, 0, static_cast<int>(n));
}

std::vector<Tensor> cond_leaves(const Tensor& pred, const LeafFn& true_fn, const LeafFn& false_fn,
                                const std::vector<Tensor>& operands, const Loc& loc) {
  const std::vector<Tensor> all = concat_leaves({pred}, operands);
  require_leaves("cond", all, loc);
  if (pred.dtype() != DType::boolean || pred.rank() != 0)
    fail("cond", all, "the predicate must be a bool scalar, got " + pred.type_string(), &loc);
  const std::vector<ValueType> params = types_of(operands);
  TracedRegion t = trace_region("cond", params, true_fn, loc);
  TracedRegion f = trace_region("cond", params, false_fn, loc);
  const std::vector<ValueType> tout = output_types(*t.graph), fout = output_types(*f.graph);
  bool same = tout.size() == fout.size();
  for (size_t k = 0; same && k < tout.size(); ++k)
    same = tout[k].dtype == fout[k].dtype && tout[k].shape == fout[k].shape;
  if (!same)
    fail("cond", all, "the branches return different types: true_fn " + types_of(tout) + ", false_fn " +
         types_of(fout), &loc);
  // Both branches take [operands..., true_fn's captures..., false_fn's captures...].
  const std::vector<Tensor> inputs = concat_leaves(concat_leaves(operands, t.captured), f.captured);
  const std::vector<ValueType> in_types = types_of(inputs);
  const size_t n = operands.size(), nt = t.captured.size(), nf = f.captured.size();
  std::vector<int> tmap, fmap;
  for (size_t k = 0; k < n + nt; ++k) tmap.push_back(static_cast<int>(k));
  for (size_t k = 0; k < n; ++k) fmap.push_back(static_cast<int>(k));
  for (size_t k = 0; k < nf; ++k) fmap.push_back(static_cast<int>(n + nt + k));
  auto region = std::make_shared<Region>();
  region->graphs = {remap_params(*t.graph, in_types, tmap), remap_params(*f.graph, in_types, fmap)};
  region->outputs = tout;
  region->site = Site::from(loc);
  region->finish();
  Attrs a;
  a.region = region;
  if (region->has_effects) a.index = TraceContext::current()->next_effect_id();
  const Tensor node = build("cond", Op::Cond, concat_leaves({pred}, inputs), std::move(a), {}, &loc);
  return outputs_of(node, 0, static_cast<int>(tout.size()));
}

std::vector<Tensor> custom_vjp_leaves(
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&, size_t*)>& fwd,
    const LeafFn& bwd, const std::vector<Tensor>& args, const Loc& loc) {
  require_leaves("custom_vjp", args, loc);
  const std::vector<ValueType> arg_types = types_of(args);
  size_t num_out = 0;
  TracedRegion f = trace_region("custom_vjp", arg_types,
                                [&](const std::vector<Tensor>& ph) { return fwd(ph, &num_out); }, loc);
  const std::vector<ValueType> results = output_types(*f.graph);
  // bwd takes [residuals..., cotangents of out...].
  std::vector<ValueType> bwd_params(results.begin() + num_out, results.end());
  bwd_params.insert(bwd_params.end(), results.begin(), results.begin() + num_out);
  TracedRegion b = trace_region("custom_vjp", bwd_params, bwd, loc);
  const std::vector<ValueType> cts = output_types(*b.graph);
  bool ok = cts.size() == args.size();
  for (size_t k = 0; ok && k < cts.size(); ++k)
    ok = cts[k].dtype == arg_types[k].dtype && cts[k].shape == arg_types[k].shape;
  if (!ok)
    fail("custom_vjp", args, "bwd returns cotangents " + types_of(cts) + " for arguments " +
         types_of(arg_types) + " (one of each argument's type)", &loc);
  const std::vector<Tensor> inputs = concat_leaves(concat_leaves(args, f.captured), b.captured);
  std::vector<int> fmap;
  for (size_t k = 0; k < args.size() + f.captured.size(); ++k) fmap.push_back(static_cast<int>(k));
  auto region = std::make_shared<Region>();
  region->graphs = {remap_params(*f.graph, types_of(inputs), fmap), b.graph};
  region->num_carry = static_cast<int>(args.size());
  region->num_xs = static_cast<int>(num_out);
  region->outputs = results;
  region->site = Site::from(loc);
  region->finish();
  Attrs a;
  a.region = region;
  if (region->has_effects) a.index = TraceContext::current()->next_effect_id();
  const Tensor node = build("custom_vjp", Op::CustomVjp, inputs, std::move(a), {}, &loc);
  return outputs_of(node, 0, static_cast<int>(num_out));
}

}  // namespace fjit::detail
