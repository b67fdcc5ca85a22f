// kElementwise and kSum groups (fusion.h): a DAG of elementwise ops grown from its root through
// its operands, written out where it is read outside (multi-output), or summed whole.
#include <algorithm>
#include <iterator>

#include "absl/container/flat_hash_map.h"
#include "core/compile/fusion/planner.h"

namespace fjit::fusion_internal {

bool Planner::fusable(int id) const {
  const Node& n = g_.node(id);
  if (n.size() == 0) return false;
  if (n.op == Op::BroadcastTo) return true;
  return op_is_elementwise(n.op);
}

// Whether `p`, read outside a group whose instruction runs at node `runs` (or an output), can
// be one of its further results: every outside reader runs after it.
bool Planner::writable_extra(int p, int runs, const std::vector<bool>& in_group) const {
  if (g_.node(p).op == Op::BroadcastTo) return false;  // no step of its own to write
  for (int c : consumers_[p])
    if (!in_group[c] && runs_at(c) <= runs) return false;
  return true;
}

// Whether elementwise node `p`, read by a group of `shape` (in_group: its nodes so far) but
// computed before it, can be computed again in the group from values that are materialized
// anyway (nodes that are not elementwise: products, reductions, parameters, constants) rather
// than read: p is in no group yet, no output, and only elementwise ops read it (no check and
// no other kernel needs p itself); so is each elementwise node between p and those values, at
// most `budget` in all. Appends the nodes to compute to `chain` (inputs first) and the
// materialized values of the group's shape that they read to `anchors`.
bool Planner::recomputable(int p, const Shape& shape, const std::vector<bool>& in_group,
                           int budget, std::vector<int>& chain, std::vector<int>& anchors) const {
  if (in_group[p] || std::find(chain.begin(), chain.end(), p) != chain.end()) return true;
  const Node& n = g_.node(p);
  if (!fusable(p)) {  // computed by an instruction of its own, which writes it
    if (n.shape == shape && std::find(anchors.begin(), anchors.end(), p) == anchors.end())
      anchors.push_back(p);
    return true;
  }
  if (plan.group_of[p] >= 0 || output_[p] || !live_[p] ||
      static_cast<int>(chain.size()) >= budget)
    return false;
  for (int c : consumers_[p])
    if (!fusable(c)) return false;
  if (n.op == Op::BroadcastTo) {  // the identity in a program: over a materialized operand only
    if (fusable(n.inputs[0])) return false;
  } else {
    if (n.shape != shape) return false;
    for (int x : n.inputs)
      if (!recomputable(x, shape, in_group, budget, chain, anchors)) return false;
  }
  if (static_cast<int>(chain.size()) >= budget) return false;
  chain.push_back(p);
  return true;
}

// A group with `root` as its last elementwise node; with `sum` >= 0, that reduce_sum of
// root's value (full, or over trailing axes: a row sum) is the group's result instead, and the
// instruction runs at it. multi_output: members may be read outside
// the group (or be outputs) too, and are then written as further results (extra_roots);
// when such a program cannot run fused, the single-output group is tried instead.
void Planner::try_elementwise(int root, int sum, bool multi_output) {
  const Shape& shape = g_.node(root).shape;
  std::vector<int> members{root}, extras, recomputed;
  std::vector<bool> in_group(g_.size(), false);
  in_group[root] = true;
  for (bool grew = true; grew && static_cast<int>(members.size()) < opt_.max_members;) {
    grew = false;
    for (size_t i = 0; i < members.size() && static_cast<int>(members.size()) < opt_.max_members;
         ++i) {
      for (int p : g_.node(members[i]).inputs) {
        if (in_group[p] || plan.group_of[p] >= 0 || !live_[p] || !fusable(p)) continue;
        const Node& pn = g_.node(p);
        if (pn.shape != shape) continue;
        // A broadcast is absorbed only over an operand that stays external.
        if (pn.op == Op::BroadcastTo && g_.node(pn.inputs[0]).shape == shape) continue;
        bool all_inside = !output_[p];
        for (int c : consumers_[p]) all_inside = all_inside && in_group[c];
        if (!all_inside) {
          if (!multi_output || static_cast<int>(extras.size()) >= opt_.max_extra_results ||
              !writable_extra(p, sum >= 0 ? sum : root, in_group))
            continue;
          extras.push_back(p);
        }
        in_group[p] = true;
        members.push_back(p);
        grew = true;
      }
    }
  }
  if (members.size() < (sum >= 0 ? 1u : 2u)) return;
  // Operands that an earlier group computes: computed again here where that reads less.
  for (size_t i = 0; opt_.recompute && i < members.size(); ++i)
    for (int p : g_.node(members[i]).inputs) {
      std::vector<int> chain, anchors;
      const int budget = opt_.max_recompute - static_cast<int>(recomputed.size());
      if (!in_group[p] && fusable(p) &&
          recomputable(p, shape, in_group, budget, chain, anchors) && anchors.size() <= 1)
        for (int x : chain) in_group[x] = true, recomputed.push_back(x);
    }
  std::sort(members.begin(), members.end());
  std::sort(recomputed.begin(), recomputed.end());
  std::vector<int> steps;  // what the program computes, in graph order
  std::merge(members.begin(), members.end(), recomputed.begin(), recomputed.end(),
             std::back_inserter(steps));
  // Further results: the members still read outside once the group stopped growing.
  extras.clear();
  for (int m : members)
    if (m != root && read_outside(m, steps)) extras.push_back(m);
  FusionGroup grp;
  grp.kind = sum >= 0 ? FusionGroup::kSum : FusionGroup::kElementwise;
  grp.root = sum >= 0 ? sum : root;
  absl::flat_hash_map<int, int> value;  // node -> program arg (step index, or -1 - operand)
  auto arg_of = [&](int x) {
    auto it = value.find(x);
    if (it != value.end()) return it->second;
    const int a = -1 - static_cast<int>(grp.inputs.size());
    grp.inputs.push_back(x);
    value[x] = a;
    return a;
  };
  for (int id : steps) {
    const Node& n = g_.node(id);
    if (n.op == Op::BroadcastTo) {  // identity: the step kernels broadcast the operand
      value[id] = arg_of(n.inputs[0]);
      continue;
    }
    FusedOp op;
    op.node = id;
    op.op = n.op;
    op.dtype = n.dtype;
    op.attrs = n.attrs;
    for (int in : n.inputs) op.args.push_back(arg_of(in));
    value[id] = static_cast<int>(grp.program.size());
    grp.program.push_back(std::move(op));
  }
  // One step is a group of its own only over a broadcast it takes in (add(x, broadcast(m))):
  // the broadcast is then never written out at its full shape.
  const bool broadcasts = steps.size() > grp.program.size();
  if (grp.program.size() < (sum >= 0 || broadcasts ? 1u : 2u) ||
      value[root] != static_cast<int>(grp.program.size()) - 1)
    return;
  grp.members = members;
  grp.recomputed = recomputed;
  grp.extra_roots = extras;
  std::vector<int> extra_steps;
  for (int x : extras) extra_steps.push_back(value[x]);
  Instr& in = grp.instr;
  for (int x : grp.inputs) in.ins.push_back({g_.node(x).dtype, g_.node(x).shape});
  if (sum >= 0) {
    grp.members.push_back(sum);
    in.op = Op::ReduceSum;
    in.out = {g_.node(sum).dtype, g_.node(sum).shape};
    const ValueType value{g_.node(root).dtype, shape};
    const bool ok = g_.node(sum).size() == 1
                        ? extras.empty() && select_fused_sum(in, value, grp.program)
                        : select_fused_row_sum(in, value, summed_row(sum), grp.program, extra_steps);
    if (!ok) {
      if (!extras.empty()) try_elementwise(root, sum, false);
      return;
    }
  } else {
    in.op = g_.node(root).op;
    in.out = {g_.node(root).dtype, shape};
    if (!select_fused_elementwise(in, grp.program, extra_steps)) {
      if (!extras.empty()) try_elementwise(root, sum, false);
      return;
    }
  }
  add_group(std::move(grp));
}

}  // namespace fjit::fusion_internal
