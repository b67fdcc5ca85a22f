// kGemm groups (fusion.h): a matmul, its scaling and the add of the update as one blocked GEMM
// update, and the sum of the product's squares merged into it.
#include <algorithm>

#include "core/compile/fusion/planner.h"

namespace fjit::fusion_internal {

// matmul m, scaled (c = m * alpha), then maybe added to (d = addend +- c): one blocked GEMM
// update (select_gemm_update). Which nodes form the update is decided on result consumers
// only (sole_result_consumer), so it is the same with checks on and off; what checks read
// besides (the product, its scaled value) is written out by the same instruction or computed
// from what it writes, and the updated values never depend on the checks.
void Planner::try_gemm(int m) {
  const Node& mm = g_.node(m);
  if (!is_floating(mm.dtype)) return;
  if (g_.node(mm.inputs[0]).dtype != mm.dtype) return;  // bf16 operands: matmul_bf16.h alone
  if (!mm.attrs.window.empty()) return;  // an image's patches as op(A): patches_gemm.h alone
  // The scale may be pmean's replica weight over n, computed before the matmul.
  const UpdateChain u = update_chain(m, /*runtime_alpha=*/true);
  // A bias add alone is left to elementwise fusion (with its activation): starting the
  // GEMM from the bias saves nothing over a fused add+relu pass.
  if (u.c < 0) return;
  const int c = u.c, root = u.root, addend = u.addend, alpha_node = u.alpha_node;
  // The instruction runs where its first result is due (the product, when it is written
  // out): the addend must exist by then. Decided without looking at checks, as above.
  if (addend > m) return;
  FusionGroup grp;
  grp.kind = FusionGroup::kGemm;
  grp.root = root;
  grp.product = m;
  grp.members = {m};
  // The scaled product is computed alone, from the written-out product, when something
  // other than the update reads it (a check).
  if (root == c || sole_consumer(c) == root) grp.members.push_back(c);
  if (root != c) grp.members.push_back(root);
  grp.inputs = {mm.inputs[0], mm.inputs[1]};
  if (addend >= 0) grp.inputs.push_back(addend);
  if (alpha_node >= 0) grp.inputs.push_back(alpha_node);
  const bool write_product = read_outside(m, grp.members);
  if (write_product) grp.extra_roots = {m};
  Instr& in = grp.instr;
  in.op = Op::MatMul;
  in.out = {g_.node(root).dtype, g_.node(root).shape};
  for (int x : grp.inputs) in.ins.push_back({g_.node(x).dtype, g_.node(x).shape});
  in.attrs.trans_a = mm.attrs.trans_a;
  in.attrs.trans_b = mm.attrs.trans_b;
  in.attrs.scalar = u.alpha;
  grp.form.alpha_operand = alpha_node >= 0;
  grp.form.product = write_product;
  if (!select_gemm_update(in, grp.form)) return;
  add_group(std::move(grp));
}

void Planner::merge_norm_sums() {
  for (size_t u = 0; u < plan.groups.size(); ++u) {
    FusionGroup& up = plan.groups[u];
    if (up.kind != FusionGroup::kGemm) continue;
    const int x = up.product;
    for (int sq : consumers_[x]) {
      const int s = plan.group_of[sq];
      if (s < 0 || plan.groups[s].kind != FusionGroup::kSum) continue;
      FusionGroup& sum = plan.groups[s];
      const bool square = g_.node(sum.root).size() == 1 && sum.program.size() == 1 &&
                          sum.program[0].op == Op::Mul &&
                          sum.program[0].args == std::vector<int>{-1, -1} &&
                          sum.inputs == std::vector<int>{x} &&
                          sum.program[0].dtype == g_.node(x).dtype;
      if (!square) continue;
      std::vector<int> members = up.members;
      members.insert(members.end(), sum.members.begin(), sum.members.end());
      std::sort(members.begin(), members.end());
      const bool write_product = read_outside(x, members);
      Instr in = up.instr;
      GemmUpdateForm form = up.form;
      form.product = write_product;
      form.sum_of_squares = true;
      if (!select_gemm_update(in, form)) {
        if (write_product) continue;
        form.product = true;  // the blocks cannot hold whole leaves: sum the written product
        if (!select_gemm_update(in, form)) continue;
      }
      up.instr = std::move(in);
      up.form = form;
      up.extra_roots.clear();
      if (form.product) up.extra_roots.push_back(x);  // the product's buffer comes first
      up.extra_roots.push_back(sum.root);
      for (int m : sum.members) plan.group_of[m] = static_cast<int>(u);
      up.members = std::move(members);
      sum.members.clear();  // left empty: no node refers to it
      break;
    }
  }
}

}  // namespace fjit::fusion_internal
