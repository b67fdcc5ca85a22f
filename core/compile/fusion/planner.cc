// The fusion planner's driver and the facts about the graph that every kind of group uses
// (planner.h).
#include "core/compile/fusion/planner.h"

#include <algorithm>

namespace fjit {
namespace fusion_internal {
namespace {

// A scalar fill constant: its value, if `id` is one.
bool scalar_constant(const Graph& g, int id, double* value) {
  const Node& n = g.node(id);
  if (n.op != Op::Constant || n.size() != 1) return false;
  if (!n.attrs.value) {
    *value = n.attrs.scalar;
    return true;
  }
  const Array& a = *n.attrs.value;
  switch (a.dtype()) {
    case DType::f32:
      *value = a.data<float>()[0];
      return true;
    case DType::f64:
      *value = a.data<double>()[0];
      return true;
    default:
      return false;
  }
}

}  // namespace

Planner::Planner(const Graph& g, const std::vector<bool>& live, const FusionOptions& o)
    : g_(g),
      live_(live),
      opt_(o),
      consumers_(g.size()),
      output_(g.size(), false),
      feeds_result_(g.size(), false) {
  for (int id = 0; id < g.size(); ++id) {
    if (!live[id]) continue;
    for (int in : g.node(id).inputs) {
      auto& c = consumers_[in];
      if (c.empty() || c.back() != id) c.push_back(id);
    }
  }
  for (int o : g.outputs) output_[o] = feeds_result_[o] = true;
  for (int e : g.effects) feeds_result_[e] = g.node(e).op != Op::Check;
  for (int id = g.size() - 1; id >= 0; --id)
    if (feeds_result_[id] && live[id])
      for (int in : g.node(id).inputs) feeds_result_[in] = true;
  plan.group_of.assign(g.size(), -1);
}

void Planner::run() {
  if (opt_.gemm_epilogue)
    for (int id = 0; id < g_.size(); ++id) {
      if (live_[id] && g_.node(id).op == Op::MatMul) try_gemm(id);
      if (live_[id] && g_.node(id).op == Op::AllReduce) try_reduce_update(id);
    }
  if (opt_.copy_chains)
    for (int id = g_.size() - 1; id >= 0; --id)
      if (live_[id] && plan.group_of[id] < 0) try_copy(id);
  if (!opt_.elementwise) return;
  for (int id = g_.size() - 1; id >= 0; --id) {
    if (!live_[id] || plan.group_of[id] >= 0) continue;
    const Node& n = g_.node(id);
    if (n.op == Op::ReduceSum && is_floating(n.dtype)) {
      const int e = n.inputs[0];
      const bool full = n.size() == 1;
      if (plan.group_of[e] < 0 && fusable(e) && g_.node(e).op != Op::BroadcastTo &&
          sole_consumer(e) == id && g_.node(e).dtype == n.dtype && (full || summed_row(id) > 0))
        try_elementwise(e, id, !full && opt_.multi_output);
    } else if (fusable(id) && n.op != Op::BroadcastTo) {
      try_elementwise(id, -1, opt_.multi_output);
    }
  }
}

int64_t Planner::summed_row(int id) const {
  const Node& n = g_.node(id);
  const Shape& in = g_.node(n.inputs[0]).shape;
  const std::vector<int64_t>& axes = n.attrs.axes;
  const auto rank = static_cast<int64_t>(in.size());
  if (axes.empty() || static_cast<int64_t>(axes.size()) >= rank) return 0;
  int64_t len = 1;
  for (size_t k = 0; k < axes.size(); ++k) {
    if (axes[k] != rank - static_cast<int64_t>(axes.size() - k)) return 0;
    len *= in[axes[k]];
  }
  return len;
}

int Planner::sole_consumer(int id) const {
  if (output_[id] || consumers_[id].size() != 1) return -1;
  return consumers_[id][0];
}

int Planner::sole_result_consumer(int id) const {
  if (output_[id]) return -1;
  int found = -1;
  for (int c : consumers_[id]) {
    if (!feeds_result_[c]) continue;
    if (found >= 0) return -1;
    found = c;
  }
  return found;
}

Planner::UpdateChain Planner::update_chain(int x, bool runtime_alpha) const {
  const Node& xn = g_.node(x);
  auto other = [&](const Node& n, int v) { return n.inputs[0] == v ? n.inputs[1] : n.inputs[0]; };
  UpdateChain u;
  for (int y : consumers_[x]) {
    const Node& cn = g_.node(y);
    if (!feeds_result_[y] || cn.op != Op::Mul || cn.inputs[0] == cn.inputs[1] ||
        cn.shape != xn.shape || cn.dtype != xn.dtype || plan.group_of[y] >= 0)
      continue;
    const int s = other(cn, x);
    if (scalar_constant(g_, s, &u.alpha)) {
      u.c = y;
      u.alpha_node = -1;
      break;
    }
    if (runtime_alpha && u.c < 0 && s < x && g_.node(s).size() == 1 && g_.node(s).dtype == xn.dtype) {
      u.c = y;
      u.alpha_node = s;
    }
  }
  if (u.c < 0) return u;
  u.root = u.c;
  const int d = sole_result_consumer(u.c);
  if (d < 0 || plan.group_of[d] >= 0) return u;
  const Node& dn = g_.node(d);
  const bool sub = dn.op == Op::Sub && dn.inputs[1] == u.c && dn.inputs[0] != u.c;
  const bool add = dn.op == Op::Add && dn.inputs[0] != dn.inputs[1];
  // p - s * x with s read at run time would need -s: the chain stops at s * x.
  if (!(sub || add) || dn.shape != xn.shape || dn.dtype != xn.dtype || (sub && u.alpha_node >= 0))
    return u;
  u.addend = other(dn, u.c);
  if (sub) u.alpha = -u.alpha;
  u.root = d;
  return u;
}

bool Planner::read_outside(int id, const std::vector<int>& members) const {
  if (output_[id]) return true;
  for (int c : consumers_[id]) {
    if (std::binary_search(members.begin(), members.end(), c)) continue;
    const int grp = plan.group_of[c];
    if (grp >= 0 && std::binary_search(plan.groups[grp].recomputed.begin(),
                                       plan.groups[grp].recomputed.end(), id))
      continue;
    return true;
  }
  return false;
}

int Planner::runs_at(int c) const {
  const int grp = plan.group_of[c];
  if (grp < 0 || plan.groups[grp].kind == FusionGroup::kElementwise ||
      plan.groups[grp].kind == FusionGroup::kSum)
    return c;
  int first = plan.groups[grp].root;
  for (int x : plan.groups[grp].extra_roots) first = std::min(first, x);
  return first;
}

void Planner::add_group(FusionGroup grp) {
  const int index = static_cast<int>(plan.groups.size());
  for (int m : grp.members) plan.group_of[m] = index;
  plan.groups.push_back(std::move(grp));
}

}  // namespace fusion_internal

FusionPlan plan_fusion(const Graph& g, const std::vector<bool>& live,
                       const FusionOptions& options) {
  fusion_internal::Planner p(g, live, options);
  p.run();
  if (options.elementwise && options.gemm_epilogue) p.merge_norm_sums();
  return std::move(p.plan);
}

}  // namespace fjit
