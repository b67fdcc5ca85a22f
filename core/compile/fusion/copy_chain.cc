// kCopy groups (fusion.h): a chain of layout ops, with maybe one f32 -> bf16 cast or a `+ 0`
// at its root, as one pass over memory (core/kernels/fused/copy_group.h).
//
// The chain is walked from its root down. Each piece of the result is tracked as a strided
// view of the value it currently comes from: positions i < ext, a base and strides in that
// value's row-major elements. Going down through
//   reshape    changes nothing (a reshape moves no element of the row-major order);
//   cast       changes nothing but the piece's conversion (one cast per piece);
//   transpose, slice   re-express the view in the operand's elements: the view must first
//              read each of the op's dimensions through its own positions (align below),
//              splitting a position's extent where it walks across two dimensions;
//   concat     (at the root, or under the root's `+ 0`) splits the piece into one per part.
// A value stops the walk, and is read as it is, when it is not such an op, when something
// else reads it too, or when it is an output.
#include <algorithm>
#include <numeric>

#include "core/compile/fusion/planner.h"
#include "core/compile/passes/pass.h"
#include "core/kernels/fused/copy_group.h"

namespace fjit::fusion_internal {
namespace {

// A piece being walked: positions ext (the last one the run), from node `src`.
struct View {
  int src = -1;
  int64_t src_base = 0, dst_base = 0;
  std::vector<int64_t> ext, srcs, dsts;
  bool cast = false;
};

// Re-expresses v's source view over `shape` (its source's shape) dimension by dimension:
// on success each position k reads dimension dim[k] with step coef[k] (coef 0 for extent 1),
// from the multi-index `base`, and no dimension's index leaves its extent. Splits a
// position's extent in two where it walks across dimensions (v's ext, srcs and dsts with it).
bool align(View& v, const Shape& shape, std::vector<int>& dim, std::vector<int64_t>& coef,
           std::vector<int64_t>& base) {
  const std::vector<int64_t> st = row_major_strides(shape);
  const int r = static_cast<int>(shape.size());
  base.assign(r, 0);
  for (int64_t rest = v.src_base, d = 0; d < r; ++d) {
    base[d] = rest / st[d];
    rest %= st[d];
  }
  dim.clear();
  coef.clear();
  for (size_t k = 0; k < v.ext.size(); ++k) {
    if (v.srcs[k] == 0 && v.ext[k] != 1) return false;  // no layout op repeats an element
    if (v.ext[k] == 1) {
      dim.push_back(0);
      coef.push_back(0);
      continue;
    }
    const int64_t s = v.srcs[k];
    int d = 0;
    while (d < r && st[d] > s) ++d;
    if (d == r || s % st[d] != 0) return false;
    const int64_t c = s / st[d];
    if (c * (v.ext[k] - 1) < shape[d]) {
      dim.push_back(d);
      coef.push_back(c);
      continue;
    }
    // Walks across dimension d: split into (ext / f, f), f steps filling d exactly.
    if (shape[d] % c != 0) return false;
    const int64_t f = shape[d] / c;
    if (f < 2 || v.ext[k] % f != 0) return false;
    v.ext.insert(v.ext.begin() + k + 1, f);
    v.srcs.insert(v.srcs.begin() + k + 1, s);
    v.dsts.insert(v.dsts.begin() + k + 1, v.dsts[k]);
    v.ext[k] /= f;
    v.srcs[k] = s * f;
    v.dsts[k] *= f;
    --k;  // position k again: the outer part, which now steps over dimension d - 1
  }
  std::vector<int64_t> reach(base);
  for (size_t k = 0; k < v.ext.size(); ++k) reach[dim[k]] += coef[k] * (v.ext[k] - 1);
  for (int d = 0; d < r; ++d)
    if (reach[d] >= shape[d]) return false;
  return true;
}

// v's view moved from transpose or slice node n to n's operand x.
bool through(View& v, const Node& n, const Node& x) {
  std::vector<int> dim;
  std::vector<int64_t> coef, base;
  if (!align(v, n.shape, dim, coef, base)) return false;
  const std::vector<int64_t> xs = row_major_strides(x.shape);
  const int r = static_cast<int>(n.shape.size());
  std::vector<int64_t> w(r);  // x's elements per step of n's dimension d
  int64_t b = 0;
  for (int d = 0; d < r; ++d) {
    if (n.op == Op::Transpose) {
      w[d] = xs[n.attrs.axes[d]];
    } else {
      w[d] = n.attrs.steps[d] * xs[d];
      b += n.attrs.starts[d] * xs[d];
    }
    b += base[d] * w[d];
  }
  v.src_base = b;
  for (size_t k = 0; k < v.ext.size(); ++k) v.srcs[k] = coef[k] * w[dim[k]];
  return true;
}

}  // namespace

void Planner::try_copy(int root) {
  const Node& rn = g_.node(root);
  if (rn.size() == 0) return;
  auto layout = [](Op op) { return op == Op::Reshape || op == Op::Transpose || op == Op::Slice; };
  // Whether the walk goes on into `x`, read by member `parent` (`cast`: a cast is on the way
  // already): parent alone reads it, and it is an op the walk follows.
  auto walkable = [&](int x, int parent, bool cast) {
    const Node& n = g_.node(x);
    if (!live_[x] || plan.group_of[x] >= 0 || sole_consumer(x) != parent || n.size() == 0) return false;
    if (layout(n.op)) return true;
    return n.op == Op::Cast && !cast && n.dtype == DType::bf16 &&
           g_.node(n.inputs[0]).dtype == DType::f32 && layout(g_.node(n.inputs[0]).op);
  };
  int moves = 0;  // members that would each be a pass over memory on their own
  std::vector<int> members{root};
  bool plus_zero = false;
  int top = root;  // the node whose whole value the walk starts from
  if (rn.op == Op::Add && rn.dtype == DType::f32 && is_plus_zero_fill(g_.node(rn.inputs[1])) &&
      g_.node(rn.inputs[1]).shape == rn.shape && g_.node(rn.inputs[0]).shape == rn.shape) {
    const int x = rn.inputs[0];
    const bool concat = g_.node(x).op == Op::Concat && live_[x] && plan.group_of[x] < 0 &&
                        sole_consumer(x) == root;
    if (!concat && !walkable(x, root, false)) return;
    plus_zero = true;
    ++moves;
    top = x;
    if (concat) members.push_back(x);
  } else if (!layout(rn.op) && rn.op != Op::Cast && rn.op != Op::Concat) {
    return;
  }
  const Node& tn = g_.node(top);
  View whole;
  whole.ext = tn.shape;
  whole.srcs = whole.dsts = row_major_strides(tn.shape);
  std::vector<View> todo;
  if (tn.op == Op::Concat) {
    ++moves;
    const int64_t a = tn.attrs.axis;
    int64_t at = 0;
    for (int part : tn.inputs) {
      const Node& pn = g_.node(part);
      View v = whole;
      v.ext[a] = pn.shape[a];
      v.srcs = row_major_strides(pn.shape);
      v.dst_base = at * whole.dsts[a];
      at += pn.shape[a];
      if (pn.size() == 0) continue;
      const bool once = std::count(tn.inputs.begin(), tn.inputs.end(), part) == 1;
      v.src = once && walkable(part, top, false) ? -2 - part : part;
      todo.push_back(v);
    }
  } else {
    whole.src = -2 - top;  // walked into first: the root, or the operand of the root's + 0
    todo.push_back(whole);
  }
  std::vector<View> done;
  while (!todo.empty()) {
    View v = todo.back();
    todo.pop_back();
    if (v.src >= 0) {
      done.push_back(v);
      continue;
    }
    const int id = -2 - v.src;
    const Node& n = g_.node(id);
    const int x = n.inputs[0];
    View next = v;
    bool ok = true;
    if (n.op == Op::Cast) {
      ok = !v.cast && n.dtype == DType::bf16 && g_.node(x).dtype == DType::f32;
      next.cast = true;
    } else if (n.op == Op::Transpose || n.op == Op::Slice) {
      ok = through(next, n, g_.node(x));
    } else {
      ok = n.op == Op::Reshape;
    }
    if (!ok) {
      if (id == root) return;  // nothing to walk
      v.src = id;  // read as it is: its own instruction computes it
      done.push_back(v);
      continue;
    }
    if (n.op != Op::Reshape) ++moves;
    if (id != root) members.push_back(id);
    next.src = walkable(x, id, next.cast) ? -2 - x : x;
    todo.push_back(next);
  }
  if (moves < 2) return;
  // Each piece's positions: extent-1 ones dropped, neighbours contiguous on both sides merged;
  // the last must be a run contiguous on both sides. Short runs are a loop per few elements:
  // only small pieces may have them.
  constexpr int64_t kMinRun = 8;
  FusionGroup grp;
  grp.kind = FusionGroup::kCopy;
  grp.root = root;
  std::vector<CopyPiece> pieces;
  for (const View& v : done) {
    CopyPiece p;
    const auto found = std::find(grp.inputs.begin(), grp.inputs.end(), v.src);
    p.operand = static_cast<int>(found - grp.inputs.begin());
    if (found == grp.inputs.end()) grp.inputs.push_back(v.src);
    p.convert = plus_zero ? CopyPiece::kPlusZero : v.cast ? CopyPiece::kToBf16 : CopyPiece::kSame;
    if (g_.node(v.src).dtype != (v.cast ? DType::f32 : rn.dtype)) return;
    p.src_base = v.src_base;
    p.dst_base = v.dst_base;
    for (size_t k = 0; k < v.ext.size(); ++k) {
      if (v.ext[k] == 1) continue;
      if (!p.ext.empty() && p.src.back() == v.srcs[k] * v.ext[k] &&
          p.dst.back() == v.dsts[k] * v.ext[k]) {
        p.ext.back() *= v.ext[k];
        p.src.back() = v.srcs[k];
        p.dst.back() = v.dsts[k];
        continue;
      }
      p.ext.push_back(v.ext[k]);
      p.src.push_back(v.srcs[k]);
      p.dst.push_back(v.dsts[k]);
    }
    const bool contiguous = !p.ext.empty() && p.src.back() == 1 && p.dst.back() == 1;
    p.run = contiguous ? p.ext.back() : 1;
    if (contiguous) {
      p.ext.pop_back();
      p.src.pop_back();
      p.dst.pop_back();
    }
    if (p.run < kMinRun && p.run * num_elements(p.ext) * kMinRun > rn.size()) return;
    pieces.push_back(std::move(p));
  }
  std::sort(members.begin(), members.end());
  grp.members = std::move(members);
  Instr& in = grp.instr;
  in.op = rn.op;
  in.out = {rn.dtype, rn.shape};
  for (int x : grp.inputs) in.ins.push_back({g_.node(x).dtype, g_.node(x).shape});
  if (!select_copy_group(in, std::move(pieces))) return;
  add_group(std::move(grp));
}

}  // namespace fjit::fusion_internal
