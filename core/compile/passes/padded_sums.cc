// Padded sums: an add whose two operands are each zero-padded along one axis (a concat of
// zero fills and values, as the adjoint of a slice makes them) with values in disjoint ranges
// of that axis becomes one concat of the values, with zero fills in the gaps. The adjoints of
// several slices of one value (q, k and v cut from one projection) are then placed in one
// buffer, instead of each padded to the full shape and the padded buffers added.
//
//   add(concat(0, a, 0), concat(0, b))  ->  add(concat(0, a, 0, b), +0)     (float dtypes)
//                                       ->  concat(0, a, 0, b)               (i32)
//
// The same bits: every element of the add's result is one value plus zeros (+0 fills only),
// and x + 0 + ... + 0 == x + 0 in IEEE arithmetic for every x (-0 + 0 is +0; a NaN stays the
// NaN x + 0 makes), so the float result keeps one `+ 0` over the whole concat (fusion makes it
// a single pass; over the gaps it gives +0 as 0 + 0 did). A sum of more operands is a chain of
// adds: each add's result, an add of a concat and a +0 fill, is read again as a padded
// operand, so the whole chain ends as one concat and one `+ 0`.
//
// Only operands that the add alone reads are taken apart (otherwise the padded buffers are
// made anyway); the operands must be concats along the same axis, or +0 fills.
#include <algorithm>
#include <vector>

#include "core/compile/passes/pass.h"

namespace fjit {
namespace {

// A run of values along the axis: [begin, begin + len) holds `id`.
struct Piece {
  int64_t begin, len;
  int id;
};

// The pieces of values in `id` (a node of `out`) along `*axis`, or false when `id` is not a
// zero-padded value. *axis is -1 until a concat fixes it.
bool padded_pieces(const Graph& out, int id, int64_t* axis, std::vector<Piece>* pieces) {
  const Node& n = out.node(id);
  if (is_plus_zero_fill(n)) return true;
  if (n.op == Op::Add && out.node(n.inputs[0]).op == Op::Concat &&
      is_plus_zero_fill(out.node(n.inputs[1])) && out.node(n.inputs[1]).shape == n.shape)
    return padded_pieces(out, n.inputs[0], axis, pieces);  // x + 0 + 0 == x + 0
  if (n.op != Op::Concat || (*axis >= 0 && n.attrs.axis != *axis)) return false;
  *axis = n.attrs.axis;
  int64_t offset = 0;
  for (int in : n.inputs) {
    const Node& part = out.node(in);
    const int64_t len = part.shape[*axis];
    if (!is_plus_zero_fill(part)) pieces->push_back({offset, len, in});
    offset += len;
  }
  return true;
}

int zero_fill(Graph& out, DType dtype, Shape shape, const Site& site) {
  Node z{Op::Constant, dtype, std::move(shape), {}, {}, site};
  z.attrs.scalar = 0.0;
  return out.add(std::move(z));
}

// The add `n` (operands mapped into `out`) as one concat, or -1 when its operands are not
// zero-padded values in disjoint ranges of one axis.
int merge(Graph& out, const Node& n) {
  int64_t axis = -1;
  std::vector<Piece> pieces;
  for (int in : n.inputs) {
    const Node& x = out.node(in);
    if (x.shape != n.shape || x.dtype != n.dtype || !padded_pieces(out, in, &axis, &pieces)) return -1;
  }
  if (axis < 0) return -1;  // two fills: nothing to merge
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < pieces.size(); ++i)
    if (pieces[i].begin < pieces[i - 1].begin + pieces[i - 1].len) return -1;  // they overlap

  std::vector<int> parts;
  int64_t at = 0;
  auto gap = [&](int64_t until) {
    if (until == at) return;
    Shape s = n.shape;
    s[axis] = until - at;
    parts.push_back(zero_fill(out, n.dtype, s, n.site));
  };
  for (const Piece& p : pieces) {
    gap(p.begin);
    parts.push_back(p.id);
    at = p.begin + p.len;
  }
  gap(n.shape[axis]);
  int v = parts[0];
  if (parts.size() > 1) {
    Node c{Op::Concat, n.dtype, n.shape, std::move(parts), {}, n.site};
    c.attrs.axis = axis;
    v = out.add(std::move(c));
  }
  if (!is_floating(n.dtype) || pieces.empty()) return v;
  return out.add(Node{Op::Add, n.dtype, n.shape, {v, zero_fill(out, n.dtype, n.shape, n.site)}, {}, n.site});
}

class PaddedSums : public Pass {
 public:
  const char* name() const override { return "padded-sums"; }

  Graph run(const Graph& g) const override {
    const std::vector<int> readers = reader_counts(g);
    return rewrite(g, [&](Graph& out, int old_id, Node n) {
      if (n.op == Op::Add) {
        const auto& ins = g.node(old_id).inputs;
        if (readers[ins[0]] == 1 && readers[ins[1]] == 1 && ins[0] != ins[1]) {
          const int merged = merge(out, n);
          if (merged >= 0) return merged;
        }
      }
      return out.add(std::move(n));
    });
  }
};

}  // namespace

std::unique_ptr<Pass> make_padded_sums() { return std::make_unique<PaddedSums>(); }

}  // namespace fjit
