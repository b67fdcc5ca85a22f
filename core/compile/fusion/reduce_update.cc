// kReduceUpdate groups (fusion.h): a sum all-reduce, its scaling and the add of the update as
// one collective.
#include "core/compile/fusion/planner.h"

namespace fjit::fusion_internal {

// psum r, scaled by a constant (c = r * alpha), then added to (d = addend +- c): one
// all-reduce update (select_reduce_update), decided on result consumers as try_gemm is. The
// collective then runs where d is: every replica runs the same plan, so the replicas still
// meet in the same collectives in the same order.
void Planner::try_reduce_update(int r) {
  const Node& rn = g_.node(r);
  if (!is_floating(rn.dtype) || rn.attrs.reduce != static_cast<uint8_t>(ReduceOp::sum) ||
      rn.inputs.size() != 1)
    return;
  const UpdateChain u = update_chain(r, /*runtime_alpha=*/false);
  if (u.addend < 0) return;  // only an update (addend +- alpha * psum) pays
  const int c = u.c, d = u.root, addend = u.addend;
  const Node& dn = g_.node(d);
  if (addend > r) return;  // it must exist where the collective would run (at r, below)
  FusionGroup grp;
  grp.kind = FusionGroup::kReduceUpdate;
  grp.root = d;
  grp.product = r;
  grp.members = {r};
  if (sole_consumer(c) == d) grp.members.push_back(c);
  grp.members.push_back(d);
  grp.inputs = {rn.inputs[0], addend};
  const bool write_reduced = read_outside(r, grp.members);
  if (write_reduced) grp.extra_roots = {r};
  Instr& in = grp.instr;
  in.op = Op::AllReduce;
  in.out = {dn.dtype, dn.shape};
  for (int x : grp.inputs) in.ins.push_back({g_.node(x).dtype, g_.node(x).shape});
  in.attrs = rn.attrs;
  in.attrs.scalar = u.alpha;
  if (!select_reduce_update(in, write_reduced)) return;
  add_group(std::move(grp));
}

}  // namespace fjit::fusion_internal
