// Cast hoisting: a cast that reads a layout op's result is moved before the layout op, so that
// it reads the value the layout op moves, and the elementwise fusion (core/compile/fusion/)
// can then compute it in the same pass that makes that value:
//   cast(reshape(x))    -> reshape(cast(x))     always (a reshape moves no bytes)
//   cast(transpose(x))  -> transpose(cast(x))   when the cast narrows (the transpose moves
//                                                fewer bytes)
// Only through layout ops that the cast alone reads (the original one is then dead, and
// dead-code elimination removes it). Each element is converted by the same kernel from the
// same value, only at another place, so no bit of any result changes.
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

// The cast `n` (its operand mapped into `out`) moved before the `depth` layout ops it reads
// through: the cast of the value under them, then the layout ops again, innermost first, over
// the cast values.
int hoist(Graph& out, Node n, int depth) {
  std::vector<Node> layouts;
  int x = n.inputs[0];
  for (; depth > 0 && hoistable(out.node(x), n.dtype); --depth) {
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
    // Readers of each node (an output counts as one). A layout op that something else reads
    // too stays where it is, with the cast after it: moving the cast would keep the value
    // under it live past the layout op, which then copies instead of reusing that storage.
    const std::vector<int> readers = reader_counts(g);
    return rewrite(g, [&](Graph& out, int old_id, Node n) {
      if (n.op != Op::Cast) return out.add(std::move(n));
      int depth = 0;
      for (int x = g.node(old_id).inputs[0]; hoistable(g.node(x), n.dtype) && readers[x] == 1;
           x = g.node(x).inputs[0])
        ++depth;
      return hoist(out, std::move(n), depth);
    });
  }
};

// Cast placement: a narrowing cast of an elementwise value is placed right after that value
// in the graph's order, which is the order of the instructions. The fusion planner can then
// make the cast in the pass that computes the value and write the value too, for its other
// readers, which all come after the cast (a further result of a group must be read after the
// group's instruction, core/compile/fusion/fusion.h). Without it, a column sum (a bias
// gradient) that reads the value before the cast in the trace's order leaves the cast a pass
// over the f32 value of its own. The cast is the same node, only earlier.
class CastPlacement : public Pass {
 public:
  const char* name() const override { return "cast-placement"; }

  Graph run(const Graph& g) const override {
    std::vector<std::vector<int>> casts(g.size());
    for (int id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      if (n.op != Op::Cast) continue;
      const Node& x = g.node(n.inputs[0]);
      if (op_is_elementwise(x.op) && dtype_size(n.dtype) < dtype_size(x.dtype))
        casts[n.inputs[0]].push_back(id);
    }
    return rewrite(g, [&](Graph& out, int old_id, Node n) {
      const int id = out.add(std::move(n));
      for (int c : casts[old_id]) {
        Node cast = g.node(c);
        cast.inputs = {id};
        out.add(std::move(cast));  // the same node again when the walk reaches c
      }
      return id;
    });
  }
};

}  // namespace

std::unique_ptr<Pass> make_cast_hoisting() { return std::make_unique<CastHoisting>(); }
std::unique_ptr<Pass> make_cast_placement() { return std::make_unique<CastPlacement>(); }

}  // namespace fjit
