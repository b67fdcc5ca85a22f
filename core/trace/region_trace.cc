#include "core/trace/region_trace.h"

#include <algorithm>
#include <atomic>

#include "core/ir/check_upstream.h"

namespace fjit::detail {
namespace {

// Placeholders are parameter nodes outside graph.parameters, distinct by this index.
constexpr int64_t kPlaceholderBase = int64_t{1} << 40;

}  // namespace

TracedRegion trace_region(const char* api, const std::vector<ValueType>& params, const RegionFn& fn,
                          const Loc& loc) {
  TraceContext* ctx = TraceContext::current();
  if (!ctx) fail(api, {}, "called outside a traced function", &loc);
  static std::atomic<int64_t> next_placeholder{0};
  Graph saved = ctx->graph;  // restored below, without the region's nodes
  const int start = ctx->graph.size();
  const size_t sites_before = ctx->check_sites.size();
  std::vector<Tensor> ph;
  std::vector<int> outs;
  try {
    for (size_t k = 0; k < params.size(); ++k) {
      Node n{Op::Parameter, params[k].dtype, params[k].shape, {}, {}, Site::from(loc)};
      n.attrs.index = kPlaceholderBase + next_placeholder.fetch_add(1);
      n.attrs.name = std::string(api) + " operand " + std::to_string(k);
      ph.push_back(Tensor::from_node(ctx, ctx->graph.add(std::move(n))));
    }
    for (const Tensor& t : fn(ph)) {
      if (!t.defined() || t.context() != ctx || t.trace_id() != ctx->trace_id())
        fail(api, {}, "the function returned an undefined Tensor or one of another trace", &loc);
      outs.push_back(t.id());
    }
  } catch (...) {
    ctx->graph = std::move(saved);
    ctx->check_sites.resize(sites_before);
    for (CheckSite& s : ctx->check_sites)
      std::erase_if(s.upstream, [&](int u) { return u >= static_cast<int>(sites_before); });
    throw;
  }
  Graph scratch = std::move(ctx->graph);
  ctx->graph = std::move(saved);
  const int end = scratch.size();
  // dep: depends on a placeholder (ids >= start only; older nodes cannot).
  std::vector<char> dep(end, 0), needed(end, 0);
  for (const Tensor& t : ph) dep[t.id()] = 1;
  for (int id = start; id < end; ++id)
    for (int in : scratch.node(id).inputs) dep[id] |= dep[in];
  for (int o : outs) needed[o] = 1;
  for (int e : scratch.effects)
    if (e >= start && dep[e]) needed[e] = 1;
  std::vector<int> captured_ids;
  for (int id = end - 1; id >= start; --id) {
    if (!needed[id]) continue;
    if (!dep[id]) {
      captured_ids.push_back(id);
      continue;
    }
    for (int in : scratch.node(id).inputs) {
      if (dep[in]) needed[in] = 1;
      else captured_ids.push_back(in);
    }
  }
  for (int o : outs)
    if (!dep[o]) captured_ids.push_back(o);
  std::sort(captured_ids.begin(), captured_ids.end());
  captured_ids.erase(std::unique(captured_ids.begin(), captured_ids.end()), captured_ids.end());

  // Nodes that depend on no placeholder go back to the enclosing trace, in order.
  std::vector<int> outer(end, -1);
  for (int id = 0; id < start; ++id) outer[id] = id;
  for (int id = start; id < end; ++id) {
    if (dep[id]) continue;
    Node n = scratch.node(id);
    for (int& in : n.inputs) in = outer[in];
    outer[id] = ctx->graph.add(std::move(n));
  }

  TracedRegion r;
  r.graph = std::make_shared<Graph>();
  Graph& g = *r.graph;
  std::vector<int> inner(end, -1);
  auto add_param = [&](const Node& like, int64_t index, const std::string& name) {
    Node p{Op::Parameter, like.dtype, like.shape, {}, {}, like.site};
    p.attrs.index = index;
    p.attrs.name = name;
    const int id = g.add(std::move(p));
    g.parameters.push_back(id);
    return id;
  };
  for (size_t k = 0; k < ph.size(); ++k)
    inner[ph[k].id()] = add_param(scratch.node(ph[k].id()), static_cast<int64_t>(k), "arg" + std::to_string(k));
  for (size_t c = 0; c < captured_ids.size(); ++c) {
    const int id = captured_ids[c];
    inner[id] = add_param(scratch.node(id), static_cast<int64_t>(ph.size() + c), "captured" + std::to_string(c));
    r.captured.push_back(Tensor::from_node(ctx, outer[id]));
  }
  for (int id = start; id < end; ++id) {
    if (!dep[id] || !needed[id] || scratch.node(id).op == Op::Parameter) continue;
    Node n = scratch.node(id);
    for (int& in : n.inputs) in = inner[in];
    inner[id] = g.add(std::move(n));
  }
  for (int o : outs) g.outputs.push_back(inner[o]);

  // Sites recorded inside: the region's lose their node (no upstream links); hoisted ones
  // follow their node back into the enclosing trace.
  std::vector<char> inside(ctx->check_sites.size(), 0);
  for (size_t s = sites_before; s < ctx->check_sites.size(); ++s) {
    CheckSite& site = ctx->check_sites[s];
    if (site.node < 0) {  // inside a region traced within this one: inside this one too
      r.sites.push_back(static_cast<int>(s));
    } else if (site.node >= start && dep[site.node]) {
      site.node = -1;
      inside[s] = 1;
      r.sites.push_back(static_cast<int>(s));
    } else if (site.node >= start) {
      site.node = outer[site.node];
    }
  }
  for (size_t s = 0; s < ctx->check_sites.size(); ++s) {
    CheckSite& site = ctx->check_sites[s];
    if (inside[s]) site.upstream.clear();
    else std::erase_if(site.upstream, [&](int u) { return inside[u] != 0; });
  }
  return r;
}

std::vector<Tensor> inline_graph(const Graph& g, const std::vector<Tensor>& params, bool keep_checks) {
  TraceContext* ctx = TraceContext::current();
  std::vector<int> map(g.size(), -1);
  for (size_t k = 0; k < g.parameters.size(); ++k) map[g.parameters[k]] = params.at(k).id();
  for (int id = 0; id < g.size(); ++id) {
    const Node& src = g.node(id);
    if (src.op == Op::Parameter) continue;
    if (src.op == Op::Check && !keep_checks) continue;
    Node n = src;
    for (int& in : n.inputs) in = map[in];
    if (n.op != Op::Check && node_has_effect(n)) n.attrs.index = ctx->next_effect_id();
    map[id] = ctx->graph.add(std::move(n));
  }
  std::vector<Tensor> out;
  for (int o : g.outputs) out.push_back(Tensor::from_node(ctx, map[o]));
  return out;
}

Tensor control_output(const Tensor& node, int k) {
  Attrs a;
  a.region = node.node().attrs.region;
  a.index = k;
  return build(op_name(node.node().op), Op::Output, {node}, std::move(a), {}, nullptr);
}

std::shared_ptr<Graph> remap_params(const Graph& g, const std::vector<ValueType>& params,
                                    const std::vector<int>& old_to_new) {
  auto out = std::make_shared<Graph>();
  std::vector<int> new_param;
  for (size_t k = 0; k < params.size(); ++k) {
    Node p{Op::Parameter, params[k].dtype, params[k].shape, {}, {}, {}};
    p.attrs.index = static_cast<int64_t>(k);
    p.attrs.name = "arg" + std::to_string(k);
    new_param.push_back(out->add(std::move(p)));
    out->parameters.push_back(new_param.back());
  }
  std::vector<int> map(g.size(), -1);
  for (size_t k = 0; k < g.parameters.size(); ++k) map[g.parameters[k]] = new_param.at(old_to_new.at(k));
  for (int id = 0; id < g.size(); ++id) {
    if (g.node(id).op == Op::Parameter) continue;
    Node n = g.node(id);
    for (int& in : n.inputs) in = map[in];
    map[id] = out->add(std::move(n));
  }
  for (int o : g.outputs) out->outputs.push_back(map[o]);
  return out;
}

void tag_loop_sites(const std::vector<int>& sites, const char* loop, const Site& loop_site) {
  TraceContext* ctx = TraceContext::current();
  for (int s : sites) {
    CheckSite& site = ctx->check_sites[s];
    if (!site.loop.empty()) continue;
    site.loop = loop;
    site.loop_site = loop_site;
  }
}

}  // namespace fjit::detail
