// Algebraic simplification: identities that are exact in IEEE arithmetic (x*1, x/1, x-0;
// not x+0, which turns -0 into +0), double negation, casts/reshapes/broadcasts that change
// nothing, chains of reshapes, and transposes folded into matmul operands (so no transpose is
// ever materialized for a matmul).
#include "core/compile/passes/pass.h"

namespace fjit {
namespace {

bool is_fill_of(const Graph& g, int id, double v) {
  const Node& n = g.node(id);
  return n.op == Op::Constant && !n.attrs.value && n.attrs.scalar == v;
}

bool swaps_last_two(const Node& t) {
  const auto& p = t.attrs.axes;
  const int r = static_cast<int>(p.size());
  if (r < 2 || p[r - 1] != r - 2 || p[r - 2] != r - 1) return false;
  for (int i = 0; i < r - 2; ++i)
    if (p[i] != i) return false;
  return true;
}

class AlgebraicSimplification : public Pass {
 public:
  const char* name() const override { return "algebraic-simplification"; }

  Graph run(const Graph& g) const override {
    return rewrite(g, [](Graph& out, int, Node n) {
      auto same_type_as = [&](int id) {
        return out.node(id).shape == n.shape && out.node(id).dtype == n.dtype;
      };
      switch (n.op) {
        case Op::Mul:
          if (is_fill_of(out, n.inputs[1], 1.0) && same_type_as(n.inputs[0])) return n.inputs[0];
          if (is_fill_of(out, n.inputs[0], 1.0) && same_type_as(n.inputs[1])) return n.inputs[1];
          break;
        case Op::Div:
          if (is_fill_of(out, n.inputs[1], 1.0) && same_type_as(n.inputs[0])) return n.inputs[0];
          break;
        case Op::Sub:  // x - (+0) == x for every x, including -0.
          if (is_fill_of(out, n.inputs[1], 0.0) && same_type_as(n.inputs[0])) return n.inputs[0];
          break;
        case Op::StopGradient:  // autodiff is done: the identity
          return n.inputs[0];
        case Op::Neg:
          if (out.node(n.inputs[0]).op == Op::Neg) return out.node(n.inputs[0]).inputs[0];
          break;
        case Op::Cast: case Op::Reshape: case Op::BroadcastTo:
          if (same_type_as(n.inputs[0])) return n.inputs[0];
          if (n.op == Op::Reshape && out.node(n.inputs[0]).op == Op::Reshape) {
            n.inputs[0] = out.node(n.inputs[0]).inputs[0];
            if (same_type_as(n.inputs[0])) return n.inputs[0];
          }
          break;
        case Op::MatMul:
          for (int k = 0; k < 2; ++k) {
            const Node& t = out.node(n.inputs[k]);
            if (t.op == Op::Transpose && swaps_last_two(t)) {
              n.inputs[k] = t.inputs[0];
              bool& flag = k == 0 ? n.attrs.trans_a : n.attrs.trans_b;
              flag = !flag;
            }
          }
          break;
        default:
          break;
      }
      return out.add(std::move(n));
    });
  }
};
}  // namespace

std::unique_ptr<Pass> make_algebraic_simplification() {
  return std::make_unique<AlgebraicSimplification>();
}

}  // namespace fjit
