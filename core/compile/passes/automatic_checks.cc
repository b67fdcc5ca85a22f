// The automatic-check pass. The graph is rebuilt with each op's checks right next to it:
// operand checks (division by zero, index range, log/sqrt domain) just before the op, the
// NaN/Inf check of its result just after. So site ids, which are renumbered in graph order,
// follow plan order, and the first raised flag of a step is the first bad value computed.
//
// One combined check per result, all(isfinite(x)) with CheckKind::nan: the report tells NaN
// from Inf by the counts the kernel takes when it fails (core/ir/check_payload.h), which costs nothing
// on a passing step, where two predicates would cost two passes.
//
// Which results get a NaN/Inf check: floating-point results of ops that can turn finite
// operands into a non-finite value (arithmetic, exp/log/sqrt, matmul, sums, casts, all-reduce,
// scatter-add). Ops that only move, select or squash values (layout, gather, select, max/min,
// relu, abs, neg, sign, tanh, sigmoid) cannot, and any non-finite operand they pass on was
// already caught where it was made; like JAX's checkify, this reports the op that *produced*
// a NaN, not every op it flowed through, at a fraction of the cost.
//
// Only ops that feed the outputs or a collective are checked: values that only feed user
// checks are the checks' own helpers, and dead values would be kept alive by their check.
//
// The sub-graphs of control-flow ops (loop bodies, branches) are rebuilt the same way, in
// place in the numbering: a body's sites come right before the sites after its loop, as its
// instructions run. Their sites have no node in the enclosing graph (node -1) and name the
// innermost loop around them, whose iteration the report gives.
#include "core/compile/passes/automatic_checks.h"

#include <optional>
#include <stdexcept>

#include "core/ir/check_upstream.h"
#include "core/ir/region.h"
#include "core/compile/passes/pass.h"
#include "core/ir/shape_rules.h"

namespace fjit {
namespace {

// Builds nodes straight into a graph: the pass runs after tracing, with no TraceContext.
class NodeMaker {
 public:
  NodeMaker(Graph& g, const Site& site) : g_(g), site_(site) {}

  int op(Op op, std::vector<int> ins, Attrs attrs = {}, ValueType hint = {DType::f32, {}}) {
    std::vector<ValueType> types;
    for (int in : ins) types.push_back({g_.node(in).dtype, g_.node(in).shape});
    const ValueType t = infer_type(op, attrs, types, hint);
    return g_.add(Node{op, t.dtype, t.shape, std::move(ins), std::move(attrs), site_});
  }
  int scalar(DType dtype, double v) {
    Attrs a;
    a.scalar = v;
    return op(Op::Constant, {}, std::move(a), {dtype, {}});
  }
  // Reduces a bool tensor over every axis (a scalar is returned as it is).
  int reduce(Op r, int x) {
    Attrs a;
    for (size_t d = 0; d < g_.node(x).shape.size(); ++d) a.axes.push_back(static_cast<int64_t>(d));
    return a.axes.empty() ? x : op(r, {x}, std::move(a));
  }
  // pred: no element of x satisfies `bad`, built as not(any(bad)) so that NaN, which
  // compares false, is left to the NaN check.
  int none(int bad) { return op(Op::LogicalNot, {reduce(Op::ReduceAny, bad)}); }
  // The elements of x that `rule` counts as bad against `bound` (check_payload::is_bad, as
  // graph ops), for the rules an operand check can have.
  int bad_elements(BadRule rule, int x, double bound) {
    const DType t = g_.node(x).dtype;
    switch (rule) {
      case BadRule::kZero: return op(Op::Eq, {x, scalar(t, 0)});
      case BadRule::kBelowBound: return op(Op::Lt, {x, scalar(t, bound)});
      case BadRule::kOutsideRange:
        return op(Op::LogicalOr, {op(Op::Lt, {x, scalar(t, 0)}), op(Op::Ge, {x, scalar(t, bound)})});
      case BadRule::kOutsideLengthRange:
        return op(Op::LogicalOr, {op(Op::Lt, {x, scalar(t, 1)}), op(Op::Gt, {x, scalar(t, bound)})});
      case BadRule::kNonFinite: case BadRule::kNeverBad: break;
    }
    throw std::logic_error("core/ir/check_kinds.def: an operand check's bad rule has no predicate");
  }

 private:
  Graph& g_;
  const Site& site_;
};


// Where the checks being added live: the top-level graph, or a region inside a loop.
struct Scope {
  bool in_region = false;
  std::string loop;  // the innermost loop's name ("" outside loops)
  Site loop_site;
};

class AutomaticChecks {
 public:
  AutomaticChecks(const Graph& g, const std::vector<CheckSite>& user, std::vector<CheckSite>& sites,
                  Scope scope)
      : sites(sites), user_(user), scope_(std::move(scope)) {
    // Live through the outputs or collectives, not through check nodes.
    live_.assign(g.size(), false);
    for (int o : g.outputs) live_[o] = true;
    for (int e : g.effects) live_[e] = g.node(e).op != Op::Check;
    for (int i = g.size() - 1; i >= 0; --i)
      if (live_[i])
        for (int in : g.node(i).inputs) live_[in] = true;
  }

  int visit(Graph& out, int old_id, Node n) {
    if (n.op == Op::Check) {  // a user check: renumbered in plan order
      CheckSite s = user_[n.attrs.index];
      n.attrs.index = static_cast<int64_t>(sites.size());
      const int id = out.add(std::move(n));
      s.node = scope_.in_region ? -1 : id;
      sites.push_back(std::move(s));
      return id;
    }
    if (n.attrs.region && n.op != Op::Output) n.attrs.region = checked_region(n.op, *n.attrs.region);
    if (!live_[old_id] || n.op == Op::Constant) return out.add(std::move(n));
    const Site site = n.site;
    const Op op = n.op;
    const std::string what = std::string(op_name(op)) + " " + type_str(n.dtype, n.shape);
    NodeMaker make(out, site);
    const std::vector<int>& ins = n.inputs;
    if (const std::optional<CheckKind> kind = op_input_check(op)) {
      // The row of the kind (core/ir/check_kinds.def) says which operand it scans and the
      // bound; the predicate is true when no element is bad by the kind's rule.
      const CheckKindInfo& info = check_kind_info(*kind);
      const int operand = check_operand(info.reads);
      if (operand >= 0 && operand < static_cast<int>(ins.size())) {  // an optional one may be absent
        const int x = ins[operand];
        const CheckBound& b = info.bound;
        const double bound =
            b.axis_extent ? static_cast<double>(out.node(ins[b.operand]).shape[b.axis < 0 ? n.attrs.axis : b.axis])
                          : b.value;
        add(make, *kind, what, site, x, bound, make.none(make.bad_elements(info.bad, x, bound)));
      }
    }
    const bool check_result = is_floating(n.dtype) && op_may_overflow(op);
    const int id = out.add(std::move(n));
    if (checked_.size() <= static_cast<size_t>(id)) checked_.resize(id + 1, false);
    if (check_result && !checked_[id]) {  // an op merged with an equal one is checked once
      checked_[id] = true;
      add(make, CheckKind::nan, what, site, id, 0,
          make.reduce(Op::ReduceAll, make.op(Op::IsFinite, {id})));
    }
    return id;
  }

  std::vector<CheckSite>& sites;

 private:
  // The region with checks added to the sub-graphs that run in the plan (custom_vjp's bwd
  // does not: the VJP inlined it at trace time).
  std::shared_ptr<const Region> checked_region(Op op, const Region& r) {
    auto out = std::make_shared<Region>(r);
    Scope inner{true, r.loop.empty() ? scope_.loop : r.loop, r.loop.empty() ? scope_.loop_site : r.site};
    for (size_t k = 0; k < out->graphs.size(); ++k) {
      if (op == Op::CustomVjp && k == 1) continue;
      const Graph& sub = *r.graphs[k];
      AutomaticChecks nested(sub, user_, sites, inner);
      out->graphs[k] = std::make_shared<const Graph>(rewrite(sub, [&nested](Graph& g, int old_id, Node n) {
        return nested.visit(g, old_id, std::move(n));
      }));
    }
    out->finish();
    // A guarded while_loop's guard sites (core/compile/loop_guard.h) have no check node: they
    // follow the sites of its sub-graphs, renumbered with the rest.
    for (int* guard : {&out->trip_site, &out->timeout_site}) {
      if (*guard < 0) continue;
      const int id = static_cast<int>(sites.size());
      sites.push_back(user_[*guard]);
      *guard = id;
    }
    if (out->trip_site >= 0 || out->timeout_site >= 0) out->has_effects = true;
    return out;
  }

  void add(NodeMaker& make, CheckKind kind, const std::string& what, const Site& site,
           int value, double bound, int pred) {
    Attrs a;
    a.index = static_cast<int64_t>(sites.size());
    a.axis = static_cast<int64_t>(kind);
    a.scalar = bound;
    CheckSite s;
    s.kind = kind;
    s.op = what;
    s.site = site;
    s.node = make.op(Op::Check, {pred, value}, std::move(a), {DType::boolean, {}});
    if (scope_.in_region) {
      s.node = -1;
      s.loop = scope_.loop;
      s.loop_site = scope_.loop_site;
    }
    sites.push_back(std::move(s));
  }

  const std::vector<CheckSite>& user_;
  Scope scope_;
  std::vector<bool> live_;
  std::vector<bool> checked_;
};

}  // namespace

void add_automatic_checks(Graph& g, std::vector<CheckSite>& sites) {
  std::vector<CheckSite> renumbered;
  AutomaticChecks pass(g, sites, renumbered, Scope{});
  Graph rebuilt = rewrite(g, [&pass](Graph& out, int old_id, Node n) {
    return pass.visit(out, old_id, std::move(n));
  });
  g = std::move(rebuilt);
  sites = std::move(renumbered);
  link_all_sites(g, sites);
}

namespace {
class AutomaticChecksPass final : public Pass {
 public:
  explicit AutomaticChecksPass(std::vector<CheckSite>* sites) : sites_(sites) {}
  const char* name() const override { return "automatic checks"; }
  Graph run(const Graph& g) const override {
    Graph out = g;
    add_automatic_checks(out, *sites_);
    return out;
  }

 private:
  std::vector<CheckSite>* sites_;
};
}  // namespace

std::unique_ptr<Pass> make_automatic_checks(std::vector<CheckSite>* sites) {
  return std::make_unique<AutomaticChecksPass>(sites);
}

}  // namespace fjit
