// Batching rules of cond with a shared (unbatched) predicate and of while_loop: the control op
// stays one op whose graphs are the example graphs batched, as JAX batches them.
//   cond, shared predicate: one cond whose branches take and return batched values.
//   while_loop, shared predicate (cond_fn reads no batched value): one while_loop whose body is
//     batched; the carries that become batched are found by a fixpoint over the body.
//   while_loop, batched predicate: every carry batched; the loop runs while any example's
//     predicate holds, and each iteration keeps the carry of the examples whose predicate is
//     false (a select), so finished examples keep their final carry. Checks in the body pass
//     for finished examples (ActiveMask), so a check reports only what a loop over the batch
//     would report.
#include <stdexcept>

#include "core/autodiff/batching.h"
#include "core/ir/region.h"
#include "core/trace/region_trace.h"

namespace fjit {
namespace batching {

namespace {

struct MaskEntry {
  Tensor mask;
  int64_t size;
};
thread_local std::vector<MaskEntry> g_masks;

// Which outputs of `g` are batched when its parameters are batched as `params` (a node is
// batched when an operand is, a check never), without recording anything.
std::vector<char> batched_outputs(const Graph& g, const std::vector<char>& params) {
  std::vector<char> b(static_cast<size_t>(g.size()), 0);
  for (size_t k = 0; k < g.parameters.size(); ++k) b[g.parameters[k]] = params.at(k);
  for (int id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op == Op::Parameter || n.op == Op::Check) continue;
    for (int in : n.inputs) b[id] = static_cast<char>(b[id] || b[in]);
  }
  std::vector<char> out;
  for (int o : g.outputs) out.push_back(b[o]);
  return out;
}

std::vector<ValueType> types_of(const std::vector<Tensor>& ts) {
  std::vector<ValueType> out;
  for (const Tensor& t : ts) out.push_back({t.dtype(), t.shape()});
  return out;
}

std::vector<Batched> bind_params(const std::vector<Tensor>& ph, const std::vector<char>& batched) {
  std::vector<Batched> ps;
  for (size_t i = 0; i < ph.size(); ++i) ps.push_back({ph[i], batched.at(i) != 0, {}, {}});
  return ps;
}

std::vector<ValueType> output_types(const Graph& g) {
  std::vector<ValueType> out;
  for (int o : g.outputs) out.push_back({g.node(o).dtype, g.node(o).shape});
  return out;
}

// The two graphs of a cond or while_loop take [ins..., first's captures..., second's
// captures...]: builds the region from `old` with those graphs and emits the node.
Tensor emit_two_graphs(const BatchArgs& a, const std::vector<Tensor>& lead, const std::vector<Tensor>& ins,
                       const detail::TracedRegion& g0, const detail::TracedRegion& g1,
                       const std::vector<ValueType>& outputs) {
  const Region& old = *a.node.attrs.region;
  std::vector<Tensor> inputs = ins;
  inputs.insert(inputs.end(), g0.captured.begin(), g0.captured.end());
  inputs.insert(inputs.end(), g1.captured.begin(), g1.captured.end());
  const std::vector<ValueType> in_types = types_of(inputs);
  const size_t n = ins.size(), n0 = g0.captured.size(), n1 = g1.captured.size();
  std::vector<int> map0, map1;
  for (size_t k = 0; k < n + n0; ++k) map0.push_back(static_cast<int>(k));
  for (size_t k = 0; k < n; ++k) map1.push_back(static_cast<int>(k));
  for (size_t k = 0; k < n1; ++k) map1.push_back(static_cast<int>(n + n0 + k));
  auto region = std::make_shared<Region>(old);
  region->graphs = {detail::remap_params(*g0.graph, in_types, map0),
                    detail::remap_params(*g1.graph, in_types, map1)};
  region->outputs = outputs;
  region->finish();
  region->has_effects = region->has_effects || old.has_effects;  // while_loop's guards
  if (!old.loop.empty()) {
    std::vector<int> sites = g0.sites;
    sites.insert(sites.end(), g1.sites.begin(), g1.sites.end());
    detail::tag_loop_sites(sites, old.loop.c_str(), old.site);
  }
  Attrs at = a.node.attrs;
  at.region = region;
  std::vector<Tensor> all = lead;
  all.insert(all.end(), inputs.begin(), inputs.end());
  return emit(a.node, all, at, {a.node.dtype, a.node.shape});
}

}  // namespace

ActiveMask::ActiveMask(const Tensor& mask, int64_t size) {
  const Tensor* outer = current(size);
  g_masks.push_back({outer ? logical_and(*outer, mask) : mask, size});
}
ActiveMask::~ActiveMask() { g_masks.pop_back(); }
const Tensor* ActiveMask::current(int64_t size) {
  if (g_masks.empty() || g_masks.back().size != size) return nullptr;
  return &g_masks.back().mask;
}

// cond(pred, operands...) with pred shared by the batch: one cond of the batched branches,
// every result batched.
Batched cond_shared_predicate(const BatchArgs& a) {
  const Region& old = *a.node.attrs.region;
  std::vector<Tensor> ins;
  std::vector<char> flags;
  for (size_t i = 1; i < a.ins.size(); ++i) {
    ins.push_back(a.ins[i].t);
    flags.push_back(a.ins[i].batched);
  }
  const std::vector<ValueType> types = types_of(ins);
  auto branch = [&](int k) {
    return detail::trace_region("vmap of cond", types, [&](const std::vector<Tensor>& ph) {
      std::vector<Tensor> r;
      for (const Batched& o : batch_graph(*old.graphs.at(k), bind_params(ph, flags), a.size))
        r.push_back(materialize(o, a.size));
      return r;
    }, Loc::current());
  };
  const detail::TracedRegion t = branch(0), f = branch(1);
  const Tensor node = emit_two_graphs(a, {a.ins.at(0).t}, ins, t, f, output_types(*t.graph));
  Batched r;
  r.t = node;
  for (size_t k = 0; k < old.outputs.size(); ++k)
    r.results.push_back({detail::control_output(node, static_cast<int>(k)), true, {}, {}});
  return r;
}

// while_loop(carry..., captured...) with a batched operand.
Batched while_batched(const BatchArgs& a) {
  const Region& old = *a.node.attrs.region;
  const Graph& cond_g = *old.graphs.at(0);
  const Graph& body_g = *old.graphs.at(1);
  const size_t nc = static_cast<size_t>(old.num_carry);
  std::vector<char> flags;
  for (const Batched& b : a.ins) flags.push_back(b.batched);
  for (bool changed = true; changed;) {  // the carries the body makes batched
    changed = false;
    const std::vector<char> out = batched_outputs(body_g, flags);
    for (size_t j = 0; j < nc; ++j)
      if (out[j] && !flags[j]) flags[j] = 1, changed = true;
  }
  const bool shared = !batched_outputs(cond_g, flags).at(0);
  if (!shared)
    for (size_t j = 0; j < nc; ++j) flags[j] = 1;
  std::vector<Tensor> ins;
  for (size_t i = 0; i < a.ins.size(); ++i)
    ins.push_back(i < nc && flags[i] ? materialize(a.ins[i], a.size) : a.ins[i].t);
  const std::vector<ValueType> types = types_of(ins);
  const char* api = "vmap of while_loop";
  // The predicate of every example, [B] (or a scalar when shared).
  auto predicate = [&](const std::vector<Tensor>& ph) {
    return batch_graph(cond_g, bind_params(ph, flags), a.size).at(0).t;
  };
  const detail::TracedRegion c = detail::trace_region(api, types, [&](const std::vector<Tensor>& ph) {
    const Tensor p = predicate(ph);
    return std::vector<Tensor>{shared ? p : any(p, {0})};
  }, Loc::current());
  const detail::TracedRegion b = detail::trace_region(api, types, [&](const std::vector<Tensor>& ph) {
    std::vector<Tensor> r;
    if (shared) {
      const std::vector<Batched> outs = batch_graph(body_g, bind_params(ph, flags), a.size);
      for (size_t j = 0; j < nc; ++j) r.push_back(flags[j] ? materialize(outs[j], a.size) : outs[j].t);
      return r;
    }
    const Tensor p = predicate(ph);
    ActiveMask active(p, a.size);
    const std::vector<Batched> outs = batch_graph(body_g, bind_params(ph, flags), a.size);
    for (size_t j = 0; j < nc; ++j) {
      const Tensor next = materialize(outs[j], a.size);
      r.push_back(where(pad_rank(p, next.rank() - 1), next, ph[j]));
    }
    return r;
  }, Loc::current());
  const std::vector<Tensor> carry(ins.begin(), ins.begin() + static_cast<std::ptrdiff_t>(nc));
  const Tensor node = emit_two_graphs(a, {}, ins, c, b, types_of(carry));
  Batched r;
  r.t = node;
  for (size_t j = 0; j < nc; ++j)
    r.results.push_back({detail::control_output(node, static_cast<int>(j)), flags[j] != 0, {}, {}});
  return r;
}

}  // namespace batching
}  // namespace fjit
