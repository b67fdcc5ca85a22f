// Layout ops: reshape, transpose, broadcast_to, slice (one strided-copy engine) and concat.
//
// Transpose, broadcast_to and slice all write a contiguous row-major output from a strided
// view of the input: out[i0..ir) = in[base + sum_k i_k * istr_k]. select() builds that view,
// drops extent-1 dimensions and merges neighbours the view keeps contiguous (broadcast dims
// merge too: stride 0 next to stride 0), then picks by the innermost dimension:
//   contiguous input       one memcpy                 (reshape, slice of whole rows)
//   istr == 1              memcpy runs under an odometer   (row slices, bias row replicate)
//   istr == 0              fill runs                   (scalar fill, [B,1] -> [B,N])
//   some other dim has istr 1   tiled 2-D transpose under an odometer (any transpose)
//   otherwise              strided gather runs         (slices with a step on the last dim)
// Kernels move words of the element size (1, 4 or 8 bytes), never interpreting values.
#include <algorithm>
#include <cassert>
#include <stdexcept>

#include "core/kernels/split_work.h"
#include "core/kernels/strided_walk.h"
#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

// Walks the odometer described by v = [n, ext[n], in strides[n], out strides[n]] starting
// at in offset p[0]; p[1] = number of positions. Calls body(in offset, out offset) for
// positions [c0, c1), in order.
template <class Body> inline void walk(const Instr& in, int64_t c0, int64_t c1, Body&& body) {
  const int n = static_cast<int>(in.v[0]);
  const int64_t* ext = in.v.data() + 1;
  strided_walk(n, ext, ext + n, ext + 2 * n, in.p[0], 0, c0, c1, body);
}

// Every position writes its own part of the output, so the positions split over the intra-op
// threads (core/kernels/split_work.h) when the copy moves `per` elements at each of them.
template <class Body> inline void walk_split(const Instr& in, int64_t per, Body&& body) {
  split_work(in.p[1], in.p[1] * per * 2, [&](int64_t c0, int64_t c1) { walk(in, c0, c1, body); });
}

// p[2] = run length; p[3] = input stride along the run.
template <class W> struct Runs {
  static void run(const Instr& in, const Frame& f) {
    const W* x = in.in<W>(f, 0);
    W* out = in.output<W>(f);
    const int64_t len = in.p[2];
    walk_split(in, len, [&](int64_t io, int64_t oo) { std::memcpy(out + oo, x + io, len * sizeof(W)); });
  }
};
template <class W> struct Fills {
  static void run(const Instr& in, const Frame& f) {
    const W* x = in.in<W>(f, 0);
    W* out = in.output<W>(f);
    const int64_t len = in.p[2];
    walk_split(in, len, [&](int64_t io, int64_t oo) { std::fill_n(out + oo, len, x[io]); });
  }
};
template <class W> struct Strided {
  static void run(const Instr& in, const Frame& f) {
    const W* x = in.in<W>(f, 0);
    W* out = in.output<W>(f);
    const int64_t len = in.p[2], s = in.p[3];
    walk_split(in, len, [&](int64_t io, int64_t oo) {
      for (int64_t j = 0; j < len; ++j) out[oo + j] = x[io + j * s];
    });
  }
};
// One 2-D transpose: out[i * ors + j] = x[i + j * ics] for i < rows, j < cols. Cache blocks
// of kBlock x kBlock, inside them full kTile x kTile tiles with compile-time bounds (which GCC
// vectorises), and a plain loop for the ragged edges.
template <class W>
void transpose_2d(const W* x, W* out, int64_t rows, int64_t ors, int64_t cols, int64_t ics) {
  constexpr int64_t kTile = sizeof(W) == 8 ? 8 : 16, kBlock = 64;
  for (int64_t i0 = 0; i0 < rows; i0 += kBlock) {
    const int64_t i1 = std::min(rows, i0 + kBlock);
    for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
      const int64_t j1 = std::min(cols, j0 + kBlock);
      for (int64_t it = i0; it < i1; it += kTile) {
        for (int64_t jt = j0; jt < j1; jt += kTile) {
          if (it + kTile <= i1 && jt + kTile <= j1) {
            for (int64_t i = 0; i < kTile; ++i) {
              W* __restrict d = out + (it + i) * ors + jt;
              const W* __restrict s = x + it + i + jt * ics;
              for (int64_t j = 0; j < kTile; ++j) d[j] = s[j * ics];
            }
          } else {
            for (int64_t i = it; i < std::min(i1, it + kTile); ++i)
              for (int64_t j = jt; j < std::min(j1, jt + kTile); ++j) out[i * ors + j] = x[i + j * ics];
          }
        }
      }
    }
  }
}

// Transposes: out dim R (extent p[2], out stride p[3], in stride 1) against the last out
// dim C (extent p[4], out stride 1, in stride p[5]), under the odometer of the other dims.
template <class W> struct Tiles {
  static void run(const Instr& in, const Frame& f) {
    const W* x = in.in<W>(f, 0);
    W* out = in.output<W>(f);
    const int64_t rows = in.p[2], ors = in.p[3], cols = in.p[4], ics = in.p[5];
    if (in.p[1] > 1) {
      walk_split(in, rows * cols, [=](int64_t io, int64_t oo) { transpose_2d(x + io, out + oo, rows, ors, cols, ics); });
      return;
    }
    // One 2-D transpose: bands of kBand rows of the output.
    constexpr int64_t kBand = 64;
    split_work((rows + kBand - 1) / kBand, 2 * rows * cols, [=](int64_t b0, int64_t b1) {
      const int64_t i0 = b0 * kBand, i1 = std::min(rows, b1 * kBand);
      transpose_2d(x + in.p[0] + i0, out + i0 * ors, i1 - i0, ors, cols, ics);
    });
  }
};

// p[0] = bytes
void copy_kernel(const Instr& in, const Frame& f) {
  const void* src = in.in<void>(f, 0);
  void* dst = in.output<void>(f);
  if (src != dst) std::memcpy(dst, src, in.p[0]);
}
// p[0] = bytes, p[1] = byte offset into the input
void offset_copy_kernel(const Instr& in, const Frame& f) {
  std::memcpy(in.output<void>(f), in.in<char>(f, 0) + in.p[1], in.p[0]);
}
void noop_kernel(const Instr&, const Frame&) {}

// v = chunk bytes per input; p[0] = outer, p[1] = output row bytes.
// Output rows split over the intra-op threads (each is its own copies).
void concat_kernel(const Instr& in, const Frame& f) {
  const size_t k = in.v.size();
  const int64_t outer = in.p[0], row = in.p[1];
  split_work(outer, outer * row / 2, [&](int64_t o0, int64_t o1) {  // elements of 4 bytes, in and out
    char* dst = in.output<char>(f) + o0 * row;
    for (int64_t o = o0; o < o1; ++o) {
      for (size_t i = 0; i < k; ++i) {
        const int64_t chunk = in.v[i];
        if (chunk == 0) continue;
        std::memcpy(dst, in.in<char>(f, static_cast<int>(i)) + o * chunk, chunk);
        dst += chunk;
      }
    }
  });
}

// Fills instr for the view out[i] = in[base + sum i_k * istr_k] over `ext`.
void select_view(Instr& instr, std::vector<int64_t> ext, std::vector<int64_t> istr, int64_t base) {
  const int64_t es = dtype_size(instr.out.dtype);
  if (instr.out.size() == 0) {
    instr.fn = noop_kernel;
    return;
  }
  // Drop extent-1 dims, then merge a dim into its inner neighbour when contiguous in the view.
  std::vector<int64_t> e, s;
  for (size_t k = 0; k < ext.size(); ++k)
    if (ext[k] != 1) { e.push_back(ext[k]); s.push_back(istr[k]); }
  for (size_t k = e.size(); k-- > 1;) {
    if (s[k - 1] == s[k] * e[k]) {
      e[k - 1] *= e[k];
      s[k - 1] = s[k];
      e.erase(e.begin() + k);
      s.erase(s.begin() + k);
    }
  }
  const int r = static_cast<int>(e.size());
  if (r == 0 || (r == 1 && s[0] == 1)) {
    instr.p[0] = instr.out.size() * es;
    instr.p[1] = base * es;
    instr.fn = offset_copy_kernel;
    return;
  }
  if (r > kMaxKernelRank) throw std::logic_error("layout: too many dimensions after merging");
  int q = -1;  // a non-last dim the input walks contiguously: transpose
  for (int k = 0; k + 1 < r; ++k)
    if (s[k] == 1) q = k;
  const bool tiles = s[r - 1] > 1 && q >= 0;
  std::vector<int64_t> ostr(r);
  for (int k = r - 1, st = 1; k >= 0; --k) {
    ostr[k] = st;
    st *= e[k];
  }
  // The walked dims: all but the last (and q when tiling).
  std::vector<int64_t> we, wi, wo;
  int64_t count = 1;
  for (int k = 0; k + 1 < r; ++k) {
    if (tiles && k == q) continue;
    we.push_back(e[k]);
    wi.push_back(s[k]);
    wo.push_back(ostr[k]);
    count *= e[k];
  }
  instr.v = {static_cast<int64_t>(we.size())};
  instr.v.insert(instr.v.end(), we.begin(), we.end());
  instr.v.insert(instr.v.end(), wi.begin(), wi.end());
  instr.v.insert(instr.v.end(), wo.begin(), wo.end());
  instr.p[0] = base;
  instr.p[1] = count;
  if (tiles) {
    instr.p[2] = e[q];
    instr.p[3] = ostr[q];
    instr.p[4] = e[r - 1];
    instr.p[5] = s[r - 1];
    instr.fn = by_element_size<Tiles>(instr.out.dtype);
    return;
  }
  instr.p[2] = e[r - 1];
  instr.p[3] = s[r - 1];
  if (s[r - 1] == 1) instr.fn = by_element_size<Runs>(instr.out.dtype);
  else if (s[r - 1] == 0) instr.fn = by_element_size<Fills>(instr.out.dtype);
  else instr.fn = by_element_size<Strided>(instr.out.dtype);
}

}  // namespace

bool select_layout(Instr& instr) {
  const ValueType& x = instr.ins[0];
  const int64_t es = dtype_size(instr.out.dtype);
  const std::vector<int64_t> xs = row_major_strides(x.shape);
  const int rank = static_cast<int>(instr.out.shape.size());
  switch (instr.op) {
    case Op::Reshape:
      assert(x.size() == instr.out.size() && x.dtype == instr.out.dtype);
      instr.p[0] = x.size() * es;
      instr.fn = x.size() == 0 ? noop_kernel : copy_kernel;
      return true;
    case Op::Transpose: {
      const std::vector<int64_t>& perm = instr.attrs.axes;
      assert(static_cast<int>(perm.size()) == rank && x.shape.size() == perm.size());
      std::vector<int64_t> istr(rank);
      for (int k = 0; k < rank; ++k) {
        assert(instr.out.shape[k] == x.shape[perm[k]]);
        istr[k] = xs[perm[k]];
      }
      select_view(instr, instr.out.shape, std::move(istr), 0);
      return true;
    }
    case Op::BroadcastTo: {
      const int lead = rank - static_cast<int>(x.shape.size());
      assert(lead >= 0);
      std::vector<int64_t> istr(rank, 0);
      for (int k = lead; k < rank; ++k) {
        assert(x.shape[k - lead] == 1 || x.shape[k - lead] == instr.out.shape[k]);
        istr[k] = x.shape[k - lead] == 1 ? 0 : xs[k - lead];
      }
      select_view(instr, instr.out.shape, std::move(istr), 0);
      return true;
    }
    case Op::Slice: {
      const Attrs& a = instr.attrs;
      assert(static_cast<int>(a.starts.size()) == rank && a.limits.size() == a.starts.size() &&
             a.steps.size() == a.starts.size());
      std::vector<int64_t> istr(rank);
      int64_t base = 0;
      for (int k = 0; k < rank; ++k) {
        assert(a.steps[k] >= 1 && a.starts[k] >= 0 && a.limits[k] <= x.shape[k]);
        assert(instr.out.shape[k] == (a.limits[k] - a.starts[k] + a.steps[k] - 1) / a.steps[k]);
        istr[k] = a.steps[k] * xs[k];
        if (instr.out.shape[k] > 0) base += a.starts[k] * xs[k];
      }
      select_view(instr, instr.out.shape, std::move(istr), base);
      return true;
    }
    case Op::Concat: {
      const int64_t axis = instr.attrs.axis;
      assert(axis >= 0 && axis < rank);
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < axis; ++d) outer *= instr.out.shape[d];
      for (int d = static_cast<int>(axis) + 1; d < rank; ++d) inner *= instr.out.shape[d];
      instr.v.clear();
      int64_t row = 0;
      for (const ValueType& t : instr.ins) {
        assert(t.shape.size() == instr.out.shape.size() && t.dtype == instr.out.dtype);
        instr.v.push_back(t.shape[axis] * inner * es);
        row += instr.v.back();
      }
      assert(row == instr.out.shape[axis] * inner * es);
      instr.p[0] = outer;
      instr.p[1] = row;
      instr.fn = instr.out.size() == 0 ? noop_kernel : concat_kernel;
      return true;
    }
    default: return false;
  }
}

}  // namespace fjit::kernels::st
