// Cast hoisting: a cast that reads a layout op's result is moved before the layout op, so that
// it reads the value the layout op moves, and the elementwise fusion (core/compile/fusion/)
// can then compute it in the same pass that makes that value:
//   cast(reshape(x))    -> reshape(cast(x))     always (a reshape moves no bytes)
//   cast(transpose(x))  -> transpose(cast(x))   when the cast narrows (the transpose moves
//                                                fewer bytes)
// Each element is converted by the same kernel from the same value, only at another place, so
// no bit of any result changes. The layout op of the original value stays while something
// else reads it; dead-code elimination removes it otherwise.
//
// This is what lets the mixed-precision policy's f32 -> bf16 casts of activations and
// cotangents (taken after a reshape to the product's rank-2 operand) be written by the fused
// pass that computes the f32 value, instead of a pass of their own over the f32 result.
#include <vector>

#include "core/compile/passes/pass.h"

namespace fjit {
namespace {

// Whether a cast to `to` may move before `layout`.
bool hoistable(const Node& layout, DType to) {
  if (layout.op == Op::Reshape) return true;
  return layout.op == Op::Transpose && dtype_size(to) < dtype_size(layout.dtype);
}

// The cast `n` (its operand mapped into `out`) moved before every layout op it reads through:
// the cast of the first value that is not a hoistable layout op's, then the layout ops again,
// innermost first, over the cast values.
int hoist(Graph& out, Node n) {
  std::vector<Node> layouts;
  int x = n.inputs[0];
  while (hoistable(out.node(x), n.dtype)) {
    layouts.push_back(out.node(x));
    x = out.node(x).inputs[0];
  }
  if (layouts.empty()) return out.add(std::move(n));
  const Site site = n.site;
  n.shape = out.node(x).shape;
  n.inputs = {x};
  int v = out.add(std::move(n));
  for (auto it = layouts.rbegin(); it != layouts.rend(); ++it) {
    Node moved = *it;
    moved.dtype = out.node(v).dtype;
    moved.inputs = {v};
    moved.site = site;
    v = out.add(std::move(moved));
  }
  return v;
}

class CastHoisting : public Pass {
 public:
  const char* name() const override { return "cast-hoisting"; }

  Graph run(const Graph& g) const override {
    return rewrite(g, [](Graph& out, int, Node n) {
      return n.op == Op::Cast ? hoist(out, std::move(n)) : out.add(std::move(n));
    });
  }
};

}  // namespace

std::unique_ptr<Pass> make_cast_hoisting() { return std::make_unique<CastHoisting>(); }

}  // namespace fjit
