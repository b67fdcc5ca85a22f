// The forward-mode walk: from the primals forward over the nodes that depend on them, applying
// one JVP rule per node (core/autodiff/jvp_rules_*.cc), and the rule table generated from the
// jvp column of core/ir/ops.def.
#include "core/autodiff/jvp.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "core/ir/region.h"

namespace fjit {
namespace autodiff {

std::vector<Tensor> jvp_none(const JvpArgs& a) {
  throw std::logic_error(std::string("no JVP rule for ") + op_name(a.node.op));
}

DType tangent_dtype(DType t) { return t == DType::bf16 ? DType::f32 : t; }

namespace {
constexpr JvpRule kRules[] = {
#define FJIT_OP(name, str, kind, arity, dtype, vjp, jvp, ...) &jvp_##jvp,
#include "core/ir/ops.def"
#undef FJIT_OP
};
static_assert(sizeof(kRules) / sizeof(kRules[0]) == kNumOps, "JVP rule table and op table disagree");
}  // namespace

}  // namespace autodiff

JvpRule jvp_rule(Op op) { return op_has_jvp(op) ? autodiff::kRules[static_cast<int>(op)] : nullptr; }

namespace {

// bf16 values made by a cast or a layout op carry an f32 tangent (as they carry an f32
// cotangent in reverse mode: the mixed-precision policy's casts); integers and bools none.
bool carries_tangent(const Node& n) {
  if (is_floating(n.dtype)) return true;
  if (op_kind(n.op) == OpKind::kControl) return true;  // its results carry the types
  return n.dtype == DType::bf16 && (n.op == Op::Cast || n.op == Op::Reshape || n.op == Op::Transpose ||
                                    n.op == Op::Slice || n.op == Op::Patches);
}

Tensor zero_tangent(const Tensor& y) {
  return full(autodiff::tangent_dtype(y.dtype()), y.shape(), 0.0);
}

}  // namespace

namespace detail {

void check_jvp_leaves(const std::vector<Tensor>& xs, const std::vector<Tensor>& txs,
                      const char* api, const Loc& loc) {
  TraceContext* ctx = TraceContext::current();
  if (!ctx) fail(api, {}, "must be called while tracing (inside jit, pmap or a traced function)", &loc);
  if (xs.size() != txs.size())
    fail(api, {}, "got " + std::to_string(xs.size()) + " primal leaves but " +
                      std::to_string(txs.size()) + " tangent leaves (they must have one structure)", &loc);
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor &x = xs[i], &t = txs[i];
    const std::string which = "primal leaf " + std::to_string(i);
    if (!x.defined() || x.context() != ctx || !t.defined() || t.context() != ctx)
      fail(api, {}, which + " or its tangent is not a value of the active trace", &loc);
    if (!is_floating(x.dtype()))
      fail(api, {x}, which + " has type " + x.type_string() +
                         ": only floating-point primals have tangents", &loc);
    if (t.dtype() != x.dtype() || t.shape() != x.shape())
      fail(api, {x, t}, which + " is " + x.type_string() + " but its tangent is " + t.type_string(), &loc);
  }
}

std::vector<Tensor> jvp_leaves(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                               const std::vector<Tensor>& txs, const char* api, const Loc& loc) {
  TraceContext* ctx = TraceContext::current();
  std::vector<Tensor> out;
  int last = -1;
  for (const Tensor& y : ys) {
    if (!y.defined() || y.context() != ctx)
      fail(api, {}, "the function returned a value that is not of the active trace", &loc);
    last = std::max(last, y.id());
  }
  Graph& g = ctx->graph;
  std::vector<Tensor> tan(last + 1);
  std::vector<bool> is_leaf(last + 1, false);
  int first = last + 1;
  for (size_t i = 0; i < xs.size(); ++i) {
    const int id = xs[i].id();
    if (id > last || !txs[i].defined()) continue;
    is_leaf[id] = true;
    first = std::min(first, id);
    tan[id] = tan[id].defined() ? add(tan[id], txs[i], loc) : txs[i];
  }
  // Only the nodes between the leaves and ys: those ys reach backward, from the first leaf
  // on. (A leaf may be read by nodes that ys do not need, such as the control op whose body
  // this walk differentiates, when the leaf is a value it captures.)
  std::vector<bool> needed(last + 1, false);
  for (const Tensor& y : ys) needed[y.id()] = true;
  for (int id = last; id >= first; --id) {
    if (!needed[id] || is_leaf[id]) continue;
    for (int in : g.node(id).inputs)
      if (in >= first) needed[in] = true;
  }
  // Which results of each control-flow node are read, and their tangents, handed to its
  // output nodes.
  absl::flat_hash_map<int, std::vector<bool>> read;
  for (int id = first; id <= last; ++id) {
    const Node& n = g.node(id);
    if (!needed[id] || n.op != Op::Output) continue;
    std::vector<bool>& r = read[n.inputs[0]];
    r.resize(n.attrs.region->outputs.size(), false);
    r[n.attrs.index] = true;
  }
  absl::flat_hash_map<int, std::vector<Tensor>> results;
  for (int id = first; id <= last; ++id) {
    if (is_leaf[id] || !needed[id]) continue;
    const Node node = g.node(id);  // a copy: rules append to the graph
    if (!carries_tangent(node)) continue;
    if (node.op == Op::Output) {
      auto r = results.find(node.inputs[0]);
      if (r != results.end() && node.attrs.index < static_cast<int64_t>(r->second.size()))
        tan[id] = r->second[node.attrs.index];
      continue;
    }
    std::vector<Tensor> ins, tins;
    bool any = false;
    for (int in : node.inputs) {
      ins.push_back(Tensor::from_node(ctx, in));
      tins.push_back(in <= last ? tan[in] : Tensor());
      any = any || tins.back().defined();
    }
    if (!any) continue;
    JvpRule rule = jvp_rule(node.op);
    if (!rule) continue;  // not differentiable: no tangent flows past it
    const Tensor value = Tensor::from_node(ctx, id);
    auto r = read.find(id);
    std::vector<Tensor> t = rule(JvpArgs{node, ins, value, tins, r == read.end() ? nullptr : &r->second});
    if (op_kind(node.op) == OpKind::kControl) {
      results[id] = std::move(t);
      continue;
    }
    if (t.empty() || !t[0].defined()) continue;
    if (t[0].shape() != node.shape || t[0].dtype() != autodiff::tangent_dtype(node.dtype))
      throw std::logic_error(std::string("jvp rule for ") + op_name(node.op) + " returned " +
                             t[0].type_string() + " for a value of type " + value.type_string());
    tan[id] = t[0];
  }
  for (const Tensor& y : ys) {
    const Tensor& t = tan[y.id()];
    if (t.defined() && t.shape() == y.shape() && t.dtype() == autodiff::tangent_dtype(y.dtype()))
      out.push_back(t);
    else
      out.push_back(is_floating(y.dtype()) || y.dtype() == DType::bf16 ? zero_tangent(y) : zeros_like(y, loc));
  }
  return out;
}

}  // namespace detail
}  // namespace fjit
