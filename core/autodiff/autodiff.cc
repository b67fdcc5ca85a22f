// The reverse-mode walk: from the output back over the nodes between the differentiated
// leaves and the output, applying one VJP rule per node and summing cotangents with add.
#include "core/autodiff/autodiff.h"

#include <algorithm>

#include "core/autodiff/recompute.h"
#include "absl/container/flat_hash_map.h"
#include "core/ir/region.h"
#include "core/base/log.h"

namespace fjit {
namespace {

// bf16 values (a cast to bf16 and the layout between it and a bf16 matmul or attention, slices
// included: the mixed-precision
// policy of core/nn/precision.h) carry a cotangent, in f32: the cotangents of a bf16 product
// are f32 products, and sums of cotangents need arithmetic, which bf16 has none of. A bf16
// value made by any other op carries none (as integers and bools), as before.
bool carries_bf16_cotangent(Op op) {
  return op == Op::Cast || op == Op::Reshape || op == Op::Transpose || op == Op::Slice || op == Op::Patches;
}

// The dtype of a value's cotangent.
DType cotangent_dtype(DType t) { return t == DType::bf16 ? DType::f32 : t; }

// Nodes that depend on some leaf (forward reach), restricted to floating-point values:
// integer and bool values carry no cotangent.
std::vector<bool> depends_on_leaves(const Graph& g, const std::vector<int>& leaves, int last) {
  std::vector<bool> dep(last + 1, false);
  for (int id : leaves)
    if (id <= last) dep[id] = true;
  for (int id = 0; id <= last; ++id) {
    const Node& n = g.node(id);
    // A control-flow op's own value is a placeholder: its results (outputs) carry the types.
    if (!is_floating(n.dtype) && !(n.dtype == DType::bf16 && carries_bf16_cotangent(n.op)) &&
        !(op_kind(n.op) == OpKind::kControl && n.op != Op::Output)) {
      dep[id] = false;
      continue;
    }
    if (dep[id]) continue;
    for (int in : n.inputs)
      if (dep[in]) {
        dep[id] = true;
        break;
      }
  }
  return dep;
}

std::string leaf_label(const Graph& g, const Tensor& t, const std::string& name) {
  const Node& n = g.node(t.id());
  if (n.op == Op::Parameter && !n.attrs.name.empty() && n.attrs.name != name)
    return "'" + name + "' (" + n.attrs.name + ")";
  return "'" + name + "'";
}

void report_unused(TraceContext& ctx, const std::vector<std::string>& unused, const char* api,
                   const Loc& loc) {
  std::string list;
  for (const std::string& u : unused) list += (list.empty() ? "" : ", ") + u;
  const bool one = unused.size() == 1;
  const std::string what = std::to_string(unused.size()) + " differentiated parameter" +
                           (one ? " never reaches" : "s never reach") + " the output, so " +
                           (one ? "its gradient is" : "their gradients are") + " zero: " + list;
  if (ctx.options.strict_unused)
    detail::fail(api, {}, what + " (strict mode: FJIT_STRICT_UNUSED / set_strict_unused_parameters)", &loc);
  std::string msg = std::string("fjit: ") + api + ": " + what + " (at " + Site::from(loc).str() + ")";
  log().warn("{}", msg);
  ctx.warnings.push_back(std::move(msg));
}

// The reverse-mode walk from outputs `ys` (with cotangents `seeds`) back to the leaves:
// returns the cotangent of every node up to the last output (undefined where none flows).
std::vector<Tensor> walk(TraceContext& tc, const std::vector<Tensor>& ys, const std::vector<Tensor>& seeds,
                         const std::vector<int>& leaf_ids, const Loc& loc) {
  TraceContext* ctx = &tc;
  Graph& g = ctx->graph;
  int last = -1;
  for (const Tensor& y : ys) last = std::max(last, y.id());
  std::vector<bool> is_leaf(last + 1, false);
  for (int id : leaf_ids)
    if (id <= last) is_leaf[id] = true;
  const std::vector<bool> dep = depends_on_leaves(g, leaf_ids, last);
  // Backward reach from y within the dependent set: the nodes whose cotangent matters. The
  // walk stops at the leaves: arguments are independent variables even when one was computed
  // from another before f was called.
  std::vector<bool> live(last + 1, false);
  std::vector<Tensor> ct(last + 1);
  for (size_t k = 0; k < ys.size(); ++k) {
    const int id = ys[k].id();
    if (!dep[id] || !seeds[k].defined()) continue;
    live[id] = true;
    ct[id] = ct[id].defined() ? add(ct[id], seeds[k], loc) : seeds[k];
  }
  for (int id = last; id >= 0; --id) {
    if (!live[id] || is_leaf[id]) continue;
    for (int in : g.node(id).inputs)
      if (dep[in]) live[in] = true;
  }
  // Per control-flow node: the cotangents of its results, gathered from its output nodes.
  absl::flat_hash_map<int, std::vector<Tensor>> results_ct;
  const Tensor none;
  for (int id = last; id >= 0; --id) {
    if (!live[id] || is_leaf[id]) continue;
    const Node node = g.node(id);  // a copy: rules append to the graph
    if (node.op == Op::Output) {
      if (!ct[id].defined()) continue;
      std::vector<Tensor>& r = results_ct[node.inputs[0]];
      r.resize(node.attrs.region->outputs.size());
      Tensor& slot = r[node.attrs.index];
      slot = slot.defined() ? add(slot, ct[id], loc) : ct[id];
      continue;
    }
    const bool control = op_kind(node.op) == OpKind::kControl;
    auto gathered = results_ct.find(id);
    if (control ? gathered == results_ct.end() : !ct[id].defined()) continue;
    VjpRule rule = vjp_rule(node.op);
    if (!rule) continue;  // not differentiable: no cotangent flows past it
    std::vector<Tensor> ins;
    std::vector<bool> need;
    for (int in : node.inputs) {
      ins.push_back(detail::backward_operand(ctx, in));  // a replay where recompute_in_backward asked
      need.push_back(live[in]);
    }
    const Tensor out = Tensor::from_node(ctx, id);
    std::vector<Tensor> in_ct = rule(VjpArgs{node, ins, out, control ? none : ct[id], need,
                                             control ? &gathered->second : nullptr});
    for (size_t k = 0; k < node.inputs.size() && k < in_ct.size(); ++k) {
      const int in = node.inputs[k];
      if (!need[k] || !in_ct[k].defined()) continue;
      if (in_ct[k].shape() != ins[k].shape() || in_ct[k].dtype() != cotangent_dtype(ins[k].dtype()))
        throw std::logic_error(std::string("vjp rule for ") + op_name(node.op) + " returned " +
                               in_ct[k].type_string() + " for input " + ins[k].type_string());
      ct[in] = ct[in].defined() ? add(ct[in], in_ct[k], loc) : in_ct[k];
    }
  }
  return ct;
}

}  // namespace

namespace detail {

void require_scalar_loss(const Tensor& y, const char* api, const Loc& loc) {
  if (!y.defined()) fail(api, {}, "the function returned an undefined Tensor", &loc);
  if (y.rank() != 0 || !is_floating(y.dtype()))
    fail(api, {y}, "can only differentiate a floating-point scalar output, got " + y.type_string() +
         (y.rank() != 0 ? " (reduce it to a scalar first, e.g. mean(...) or sum(...))" : ""), &loc);
}

std::vector<Tensor> vjp_named(const Tensor& y, const WrtLeaves& wrt, const Tensor& seed,
                              const char* api, const Loc& loc) {
  if (!y.defined()) fail(api, {}, "the output is an undefined Tensor", &loc);
  TraceContext* ctx = y.context();
  if (ctx != TraceContext::current()) fail(api, {y}, "the output is not from the active trace", &loc);
  if (!seed.defined() || seed.dtype() != y.dtype() || seed.shape() != y.shape())
    fail(api, {y, seed}, "the seed cotangent must have the output's type", &loc);
  std::vector<int> leaf_ids;
  for (size_t i = 0; i < wrt.tensors.size(); ++i) {
    const Tensor& t = wrt.tensors[i];
    if (!t.defined() || t.context() != ctx)
      fail(api, {}, "differentiated argument '" + wrt.names[i] + "' is not a value of the active trace", &loc);
    if (!is_floating(t.dtype()))
      fail(api, {t}, "cannot differentiate with respect to '" + wrt.names[i] + "' of type " +
           t.type_string() + ": only floating-point inputs have gradients (leave it out with argnums)", &loc);
    leaf_ids.push_back(t.id());
  }

  std::vector<Tensor> ct = walk(*ctx, {y}, {seed}, leaf_ids, loc);
  std::vector<Tensor> out;
  std::vector<std::string> unused;
  for (size_t i = 0; i < wrt.tensors.size(); ++i) {
    const int id = leaf_ids[i];
    if (id < static_cast<int>(ct.size()) && ct[id].defined()) {
      out.push_back(ct[id]);
    } else {
      out.push_back(zeros_like(wrt.tensors[i], loc));
      unused.push_back(leaf_label(ctx->graph, wrt.tensors[i], wrt.names[i]));
    }
  }
  if (!unused.empty()) report_unused(*ctx, unused, api, loc);
  return out;
}

}  // namespace detail

std::vector<Tensor> detail::vjp_many(const std::vector<Tensor>& ys, const std::vector<Tensor>& seeds,
                                     const std::vector<Tensor>& wrt, const Loc& loc) {
  TraceContext* ctx = TraceContext::current();
  std::vector<int> leaf_ids;
  for (const Tensor& t : wrt) leaf_ids.push_back(t.id());
  std::vector<Tensor> out;
  if (ys.empty()) {
    for (const Tensor& t : wrt) out.push_back(zeros_like(t, loc));
    return out;
  }
  const std::vector<Tensor> ct = walk(*ctx, ys, seeds, leaf_ids, loc);
  for (const Tensor& t : wrt)
    out.push_back(t.id() < static_cast<int>(ct.size()) && ct[t.id()].defined() ? ct[t.id()] : zeros_like(t, loc));
  return out;
}

std::vector<Tensor> vjp(const Tensor& y, const std::vector<Tensor>& wrt, const Tensor& seed, Loc loc) {
  detail::WrtLeaves w;
  for (size_t i = 0; i < wrt.size(); ++i) {
    const bool param = wrt[i].defined() && wrt[i].node().op == Op::Parameter;
    w.tensors.push_back(wrt[i]);
    w.names.push_back(param ? wrt[i].node().attrs.name : "wrt[" + std::to_string(i) + "]");
  }
  return detail::vjp_named(y, w, seed, "vjp", loc);
}

}  // namespace fjit
