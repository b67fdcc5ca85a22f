// The batching walk, the rule table generated from the batch column of core/ir/ops.def, the
// helpers the rules share, and the rules that are about the walk itself: check, control flow
// and per-example ops.
#include "core/autodiff/batching.h"

#include <fmt/format.h>

#include <stdexcept>

#include "core/ir/region.h"
#include "core/ir/shape_rules.h"
#include "core/trace/region_trace.h"

namespace fjit {
namespace batching {

namespace {
constexpr BatchRule kRules[] = {
#define FJIT_OP(name, str, kind, arity, dtype, vjp, jvp, finite, input_check, family, builder, batch) \
  &batch_##batch,
#include "core/ir/ops.def"
#undef FJIT_OP
};
static_assert(sizeof(kRules) / sizeof(kRules[0]) == kNumOps, "batch rule table and op table disagree");

std::string types_of(const std::vector<Tensor>& ts) {
  std::string s;
  for (const Tensor& t : ts) s += (s.empty() ? "" : ", ") + t.type_string();
  return s;
}

// A check node now in the current trace: its site points at it.
void place_check(const Node& n, int id) {
  if (n.op != Op::Check) return;
  TraceContext* ctx = TraceContext::current();
  const auto site = static_cast<size_t>(n.attrs.index);
  if (site < ctx->check_sites.size()) ctx->check_sites[site].node = id;
}
}  // namespace

BatchRule batch_rule(Op op) { return kRules[static_cast<int>(op)]; }

Tensor emit(const Node& like, const std::vector<Tensor>& inputs, const Attrs& attrs,
            const ValueType& hint) {
  TraceContext* ctx = TraceContext::current();
  std::vector<ValueType> types;
  std::vector<int> ids;
  for (const Tensor& t : inputs) {
    types.push_back({t.dtype(), t.shape()});
    ids.push_back(t.id());
  }
  ValueType vt;
  try {
    vt = infer_type(like.op, attrs, types, hint);
  } catch (const ShapeRuleError& e) {
    throw TraceError(fmt::format("fjit: vmap: batching {} (at {}) failed on operands {}: {}",
                                 op_name(like.op), like.site.str(), types_of(inputs), e.what()));
  }
  Node n{like.op, vt.dtype, vt.shape, std::move(ids), attrs, like.site};
  if (n.op != Op::Check && node_has_effect(n)) n.attrs.index = ctx->next_effect_id();
  const int id = ctx->graph.add(n);
  place_check(n, id);
  return Tensor::from_node(ctx, id);
}

Shape with_batch(int64_t size, const Shape& s) {
  Shape out{size};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

Tensor materialize(const Batched& b, int64_t size) {
  if (b.batched) return b.t;
  const Shape s = b.t.shape();
  Shape one{1};
  one.insert(one.end(), s.begin(), s.end());
  return broadcast_to(reshape(b.t, one), with_batch(size, s));
}

Tensor pad_rank(const Tensor& t, int rank) {
  const Shape s = t.shape();
  const int have = static_cast<int>(s.size()) - 1;
  if (have >= rank) return t;
  Shape out{s[0]};
  out.insert(out.end(), static_cast<size_t>(rank - have), 1);
  out.insert(out.end(), s.begin() + 1, s.end());
  return reshape(t, out);
}

Tensor example(const Tensor& t, int64_t i) {
  const Shape s = t.shape();
  Axes starts(s.size(), 0), limits(s.begin(), s.end());
  starts[0] = i;
  limits[0] = i + 1;
  return reshape(slice(t, starts, limits), Shape(s.begin() + 1, s.end()));
}

Tensor stack(const std::vector<Tensor>& ts) {
  std::vector<Tensor> rows;
  for (const Tensor& t : ts) rows.push_back(reshape(t, with_batch(1, t.shape())));
  return concat(rows, 0);
}

Tensor move_axis(const Tensor& t, int from, int to) {
  if (from == to) return t;
  Axes perm;
  for (int d = 0; d < t.rank(); ++d)
    if (d != from) perm.push_back(d);
  perm.insert(perm.begin() + to, from);
  return transpose(t, perm);
}

std::vector<Batched> batch_graph(const Graph& g, const std::vector<Batched>& params, int64_t size) {
  TraceContext* ctx = TraceContext::current();
  std::vector<Batched> map(static_cast<size_t>(g.size()));
  for (size_t k = 0; k < g.parameters.size(); ++k) map[g.parameters[k]] = params.at(k);
  for (int id = 0; id < g.size(); ++id) {
    const Node src = g.node(id);  // a copy: the rules grow the current graph, not g
    if (src.op == Op::Parameter) continue;
    std::vector<Batched> ins;
    bool any = false;
    for (int in : src.inputs) {
      ins.push_back(map[in]);
      any = any || map[in].batched || !map[in].per_example.empty() || !map[in].results.empty();
    }
    if (!any) {  // no batched operand: the node as it is
      Node n = src;
      for (size_t i = 0; i < ins.size(); ++i) n.inputs[i] = ins[i].t.id();
      if (n.op != Op::Check && node_has_effect(n)) n.attrs.index = ctx->next_effect_id();
      const int nid = ctx->graph.add(n);
      place_check(n, nid);
      map[id] = Batched{Tensor::from_node(ctx, nid), false, {}};
      continue;
    }
    map[id] = batch_rule(src.op)(BatchArgs{src, ins, size});
  }
  std::vector<Batched> out;
  for (int o : g.outputs) out.push_back(map[o]);
  return out;
}

// Rules about the walk itself.

Batched batch_source(const BatchArgs& a) {
  throw std::logic_error(std::string("vmap: ") + op_name(a.node.op) + " has no operands to batch");
}

namespace {
// cond(pred [B], operands...): both branches batched, each result selected per example by its
// predicate (as JAX batches a cond with a batched predicate: both branches run).
Batched cond_as_select(const BatchArgs& a) {
  const Region& region = *a.node.attrs.region;
  const std::vector<Batched> operands(a.ins.begin() + 1, a.ins.end());
  const std::vector<Batched> t = batch_graph(*region.graphs.at(0), operands, a.size);
  const std::vector<Batched> f = batch_graph(*region.graphs.at(1), operands, a.size);
  const Tensor pred = a.ins[0].t;  // bool [B]
  Batched r;
  r.t = pred;
  for (size_t k = 0; k < t.size(); ++k) {
    const Tensor tk = materialize(t[k], a.size), fk = materialize(f[k], a.size);
    r.results.push_back({where(pad_rank(pred, tk.rank() - 1), tk, fk), true, {}, {}});
  }
  return r;
}
// scan over a batch: one scan whose body is the example body batched. Every carry is batched
// (an unbatched one broadcast), batched xs iterate as [L, B, ...], and the stacked results come
// back as [B, L, ...].
Batched scan_batched(const BatchArgs& a) {
  const Region& old = *a.node.attrs.region;
  const int nc = old.num_carry, nx = old.num_xs;
  std::vector<Tensor> ins;
  std::vector<ValueType> types;
  std::vector<char> batched;
  for (size_t i = 0; i < a.ins.size(); ++i) {
    const Batched& b = a.ins[i];
    const int k = static_cast<int>(i);
    Tensor t = k < nc ? materialize(b, a.size) : (k < nc + nx && b.batched ? move_axis(b.t, 0, 1) : b.t);
    Shape s = t.shape();
    if (k >= nc && k < nc + nx) s.erase(s.begin());  // the body sees one row
    ins.push_back(t);
    types.push_back({t.dtype(), s});
    batched.push_back(k < nc || b.batched);
  }
  const Graph& body = *old.graphs.at(0);
  detail::TracedRegion tr = detail::trace_region("vmap of scan", types, [&](const std::vector<Tensor>& ph) {
    std::vector<Batched> ps;
    for (size_t i = 0; i < ph.size(); ++i) ps.push_back({ph[i], batched[i] != 0, {}, {}});
    std::vector<Tensor> r;
    for (const Batched& o : batch_graph(body, ps, a.size)) r.push_back(materialize(o, a.size));
    return r;
  }, Loc::current());
  auto region = std::make_shared<Region>(old);
  region->graphs = {tr.graph};
  region->outputs.clear();
  std::vector<ValueType> body_out;
  for (int o : tr.graph->outputs) body_out.push_back({tr.graph->node(o).dtype, tr.graph->node(o).shape});
  auto stacked = [&](ValueType t) {
    t.shape.insert(t.shape.begin(), old.length);
    return t;
  };
  const int ny = static_cast<int>(body_out.size()) - nc;
  for (int j = 0; j < nc; ++j) region->outputs.push_back(body_out[j]);
  for (int k = 0; k < ny; ++k) region->outputs.push_back(stacked(body_out[nc + k]));
  for (int j = 0; j < nc; ++j) region->outputs.push_back(stacked(body_out[j]));
  region->finish();
  detail::tag_loop_sites(tr.sites, region->loop.c_str(), region->site);
  Attrs at = a.node.attrs;
  at.region = region;
  ins.insert(ins.end(), tr.captured.begin(), tr.captured.end());
  const Tensor node = emit(a.node, ins, at, {a.node.dtype, a.node.shape});
  Batched r;
  r.t = node;
  for (int j = 0; j < nc; ++j) r.results.push_back({detail::control_output(node, j), true, {}, {}});
  for (int k = nc; k < nc + ny + nc; ++k)
    r.results.push_back({move_axis(detail::control_output(node, k), 1, 0), true, {}, {}});
  return r;
}
}  // namespace

// One op per example: a random draw from each example's key (JAX's rule for a batched key),
// fold_in of batched data.
Batched batch_per_example(const BatchArgs& a) {
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < a.size; ++i) {
    std::vector<Tensor> ins;
    for (const Batched& b : a.ins) ins.push_back(b.batched ? example(b.t, i) : b.t);
    rows.push_back(emit(a.node, ins, a.node.attrs, {a.node.dtype, a.node.shape}));
  }
  return {stack(rows), true, {}};
}

// A control op with a batched operand: a scan (fori_loop) is one scan of the batched body; a
// cond whose predicate is batched, a select of its two batched branches; a cond with a shared
// predicate and a while_loop, one op of batched graphs (batching_control.cc); the others
// (custom_vjp, remat), one op per example, each over its own rows, whose results the `output`
// nodes stack.
Batched batch_control(const BatchArgs& a) {
  Batched r;
  if (a.node.op == Op::Cond && a.ins.at(0).batched) return cond_as_select(a);
  if (a.node.op == Op::Cond) return cond_shared_predicate(a);
  if (a.node.op == Op::Scan) return scan_batched(a);
  if (a.node.op == Op::WhileLoop) return while_batched(a);
  for (int64_t i = 0; i < a.size; ++i) {
    std::vector<Tensor> ins;
    for (const Batched& b : a.ins) ins.push_back(b.batched ? example(b.t, i) : b.t);
    r.per_example.push_back(emit(a.node, ins, a.node.attrs, {a.node.dtype, a.node.shape}));
  }
  r.t = r.per_example[0];
  return r;
}

Batched batch_output(const BatchArgs& a) {
  const Batched& ctl = a.ins.at(0);
  if (!ctl.results.empty()) return ctl.results.at(static_cast<size_t>(a.node.attrs.index));
  if (ctl.per_example.empty())
    throw std::logic_error("vmap: an output of a control op that was not batched per example");
  std::vector<Tensor> rows;
  for (const Tensor& op : ctl.per_example)
    rows.push_back(detail::control_output(op, static_cast<int>(a.node.attrs.index)));
  return {stack(rows), true, {}};
}

// check(pred, values...) over a batch: one check that passes when every example's does, and
// reports the values of the first failing example and its index in the batch.
Batched batch_check(const BatchArgs& a) {
  TraceContext* ctx = TraceContext::current();
  Tensor pred = materialize(a.ins.at(0), a.size);  // bool [B]
  if (const Tensor* active = ActiveMask::current(a.size)) pred = logical_or(pred, !*active);
  const Tensor first_bad = argmin(cast(pred, DType::i32), 0);
  std::vector<Tensor> ins{all(pred, {0})};
  for (size_t k = 1; k < a.ins.size(); ++k) {
    const Batched& v = a.ins[k];
    ins.push_back(v.batched ? reshape(take(v.t, reshape(first_bad, {1}), 0), {}) : v.t);
  }
  const auto site = static_cast<size_t>(a.node.attrs.index);
  if (site < ctx->check_sites.size() && ctx->check_sites[site].num_values < kMaxCheckValues) {
    CheckSite& s = ctx->check_sites[site];
    s.format += " (vmap batch element {})";
    ++s.num_values;
    ins.push_back(first_bad);
  }
  return {emit(a.node, ins, a.node.attrs, {DType::boolean, {}}), false, {}};
}

}  // namespace batching
}  // namespace fjit
