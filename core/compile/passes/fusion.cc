#include "core/compile/passes/fusion.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

namespace fjit {
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

class Planner {
 public:
  Planner(const Graph& g, const std::vector<bool>& live, const FusionOptions& o)
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

  void run() {
    if (opt_.gemm_epilogue)
      for (int id = 0; id < g_.size(); ++id) {
        if (live_[id] && g_.node(id).op == Op::MatMul) try_gemm(id);
        if (live_[id] && g_.node(id).op == Op::AllReduce) try_reduce_update(id);
      }
    if (!opt_.elementwise) return;
    for (int id = g_.size() - 1; id >= 0; --id) {
      if (!live_[id] || plan.group_of[id] >= 0) continue;
      const Node& n = g_.node(id);
      if (n.op == Op::ReduceSum && n.size() == 1 && is_floating(n.dtype)) {
        const int e = n.inputs[0];
        if (plan.group_of[e] < 0 && fusable(e) && g_.node(e).op != Op::BroadcastTo &&
            sole_consumer(e) == id && g_.node(e).dtype == n.dtype)
          try_elementwise(e, id, false);
      } else if (fusable(id) && n.op != Op::BroadcastTo) {
        try_elementwise(id, -1, opt_.multi_output);
      }
    }
  }

  // A GEMM update whose product is also squared and summed (sum(dW * dW) of a gradient norm)
  // computes that sum too, from the product blocks it already holds in cache: dW is then not
  // written out at all unless something else reads it.
  void merge_norm_sums() {
    for (size_t u = 0; u < plan.groups.size(); ++u) {
      FusionGroup& up = plan.groups[u];
      if (up.kind != FusionGroup::kGemm) continue;
      const int x = up.product;
      for (int sq : consumers_[x]) {
        const int s = plan.group_of[sq];
        if (s < 0 || plan.groups[s].kind != FusionGroup::kSum) continue;
        FusionGroup& sum = plan.groups[s];
        const bool square = sum.program.size() == 1 && sum.program[0].op == Op::Mul &&
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

  FusionPlan plan;

 private:
  // `id`'s only consumer, when it has exactly one and is not an output.
  int sole_consumer(int id) const {
    if (output_[id] || consumers_[id].size() != 1) return -1;
    return consumers_[id][0];
  }

  bool fusable(int id) const {
    const Node& n = g_.node(id);
    if (n.size() == 0) return false;
    if (n.op == Op::BroadcastTo) return true;
    return op_is_elementwise(n.op);
  }

  // The result consumer of `id` when it has exactly one and is not an output: check helpers
  // are not counted, so the answer is the same with checks on and off.
  int sole_result_consumer(int id) const {
    if (output_[id]) return -1;
    int found = -1;
    for (int c : consumers_[id]) {
      if (!feeds_result_[c]) continue;
      if (found >= 0) return -1;
      found = c;
    }
    return found;
  }

  // The update chain after x: c = x * alpha (alpha a scalar constant, or with runtime_alpha a
  // scalar computed before x, read when the step runs), then maybe root = addend +- c. Decided
  // on result consumers only (sole_result_consumer), so the same with checks on and off.
  struct UpdateChain {
    int c = -1, root = -1, addend = -1, alpha_node = -1;
    double alpha = 1;
  };
  UpdateChain update_chain(int x, bool runtime_alpha) const {
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

  // matmul m, scaled (c = m * alpha), then maybe added to (d = addend +- c): one blocked GEMM
  // update (select_gemm_update). Which nodes form the update is decided on result consumers
  // only (sole_result_consumer), so it is the same with checks on and off; what checks read
  // besides (the product, its scaled value) is written out by the same instruction or computed
  // from what it writes, and the updated values never depend on the checks.
  void try_gemm(int m) {
    const Node& mm = g_.node(m);
    if (!is_floating(mm.dtype)) return;
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

  // psum r, scaled by a constant (c = r * alpha), then added to (d = addend +- c): one
  // all-reduce update (select_reduce_update), decided on result consumers as try_gemm is. The
  // collective then runs where d is: every replica runs the same plan, so the replicas still
  // meet in the same collectives in the same order.
  void try_reduce_update(int r) {
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

  // Whether `id`'s value is needed outside `members` (an output, or a live consumer that is
  // not a member): then a group computing it must write it out.
  bool read_outside(int id, const std::vector<int>& members) const {
    if (output_[id]) return true;
    for (int c : consumers_[id])
      if (!std::binary_search(members.begin(), members.end(), c)) return true;
    return false;
  }

  // Where the instruction that reads `c` runs: a GEMM or all-reduce update at the earliest of
  // its results, anything else at c or later (an elementwise group at its root).
  int runs_at(int c) const {
    const int grp = plan.group_of[c];
    if (grp < 0 || plan.groups[grp].kind == FusionGroup::kElementwise) return c;
    int first = plan.groups[grp].root;
    for (int x : plan.groups[grp].extra_roots) first = std::min(first, x);
    return first;
  }

  // Whether `p`, read outside a group whose instruction runs at `root` (or an output), can be
  // one of its further results: every outside reader runs after root.
  bool writable_extra(int p, int root, const std::vector<bool>& in_group) const {
    if (g_.node(p).op == Op::BroadcastTo) return false;  // no step of its own to write
    for (int c : consumers_[p])
      if (!in_group[c] && runs_at(c) <= root) return false;
    return true;
  }

  // A group with `root` as its last elementwise node; with `sum` >= 0, that full reduce_sum
  // of root's value is the group's result instead. multi_output: members may be read outside
  // the group (or be outputs) too, and are then written as further results (extra_roots);
  // when such a program cannot run fused, the single-output group is tried instead.
  void try_elementwise(int root, int sum, bool multi_output) {
    const Shape& shape = g_.node(root).shape;
    std::vector<int> members{root}, extras;
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
                !writable_extra(p, root, in_group))
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
    std::sort(members.begin(), members.end());
    // Further results: the members still read outside once the group stopped growing.
    extras.clear();
    for (int m : members)
      if (m != root && read_outside(m, members)) extras.push_back(m);
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
    for (int id : members) {
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
    if (grp.program.size() < (sum >= 0 ? 1u : 2u) ||
        value[root] != static_cast<int>(grp.program.size()) - 1)
      return;
    grp.members = members;
    grp.extra_roots = extras;
    std::vector<int> extra_steps;
    for (int x : extras) extra_steps.push_back(value[x]);
    Instr& in = grp.instr;
    for (int x : grp.inputs) in.ins.push_back({g_.node(x).dtype, g_.node(x).shape});
    if (sum >= 0) {
      grp.members.push_back(sum);
      in.op = Op::ReduceSum;
      in.out = {g_.node(sum).dtype, g_.node(sum).shape};
      if (!select_fused_sum(in, {g_.node(root).dtype, shape}, grp.program)) return;
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

  void add_group(FusionGroup grp) {
    const int index = static_cast<int>(plan.groups.size());
    for (int m : grp.members) plan.group_of[m] = index;
    plan.groups.push_back(std::move(grp));
  }

  const Graph& g_;
  const std::vector<bool>& live_;
  const FusionOptions& opt_;
  std::vector<std::vector<int>> consumers_;  // distinct live consumers, in graph order
  std::vector<bool> output_;
  // Reaches an output or a collective, not only checks: with checks off, the same nodes exist.
  std::vector<bool> feeds_result_;
};

}  // namespace

FusionPlan plan_fusion(const Graph& g, const std::vector<bool>& live,
                       const FusionOptions& options) {
  Planner p(g, live, options);
  p.run();
  if (options.elementwise && options.gemm_epilogue) p.merge_norm_sums();
  return std::move(p.plan);
}

}  // namespace fjit
