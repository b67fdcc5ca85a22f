// FusionPlan::describe: the "fused[...]" / "gemm[...]" text of a group in plan dumps.
#include <cstdio>

#include "core/compile/fusion/fusion.h"

namespace fjit {

std::string FusionPlan::describe(int group) const {
  const FusionGroup& grp = groups[group];
  if (grp.kind == FusionGroup::kElementwise) {
    std::string s = "fused[" + fused_program_string(grp.program);
    if (!grp.extra_roots.empty()) {
      s += "; also writes";
      for (int x : grp.extra_roots) s += " %" + std::to_string(x);
    }
    s += "]";
    if (const char* name = compiled_fused_name(grp.instr)) s += std::string("[compiled: ") + name + "]";
    return s;
  }
  if (grp.kind == FusionGroup::kSum) {
    std::string s = "fused_sum[" + fused_program_string(grp.program) + "; %" +
                    std::to_string(grp.root) + " = sum";
    if (!grp.extra_roots.empty()) {
      s += "; also writes";
      for (int x : grp.extra_roots) s += " %" + std::to_string(x);
    }
    return s + "]";
  }
  if (grp.kind == FusionGroup::kCopy) {
    std::string s = "copy[%" + std::to_string(grp.root) + " from";
    for (size_t k = 0; k < grp.inputs.size(); ++k) s += (k ? ", %" : " %") + std::to_string(grp.inputs[k]);
    s += "; nodes";
    for (int m : grp.members) s += " %" + std::to_string(m);
    return s + "]";
  }
  const Instr& in = grp.instr;
  char alpha[32];
  std::snprintf(alpha, sizeof alpha, "%g", in.attrs.scalar);
  if (grp.kind == FusionGroup::kReduceUpdate) {
    std::string s = "reduce_update[%" + std::to_string(grp.root) + " = in1 + " + alpha +
                    " * psum(in0)";
    for (int x : grp.extra_roots) s += ", %" + std::to_string(x) + " = psum(in0)";
    s += "; nodes";
    for (int m : grp.members) s += " %" + std::to_string(m);
    return s + "]";
  }
  std::string s = "gemm[%" + std::to_string(grp.root) + " = ";
  if (in.ins.size() - grp.form.alpha_operand == 3) s += "in2 + ";
  if (grp.form.alpha_operand) std::snprintf(alpha, sizeof alpha, "in%zu", in.ins.size() - 1);
  const std::string product = std::string("in0") + (in.attrs.trans_a ? "^T" : "") + " in1" +
                              (in.attrs.trans_b ? "^T" : "");
  s += std::string(alpha) + " * " + product;
  for (int x : grp.extra_roots)
    s += ", %" + std::to_string(x) + (x == grp.product ? " = " + product : " = sum of its squares");
  s += "; nodes";
  for (int m : grp.members) s += " %" + std::to_string(m);
  return s + "]";
}

}  // namespace fjit
