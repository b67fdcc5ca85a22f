// Reductions: sum / max / min over f32, f64, i32 and all / any over bool.
//
// select() drops extent-1 dimensions and merges neighbours that are both reduced or both
// kept, which leaves an alternating list of groups. The common layouts get their own kernel:
//   [R]        full reduction to a scalar      (Eigen redux, blocked pairwise for sums)
//   [K, R]     row-wise, one redux per row (a scalar fold for short rows: class logits)
//   [K?, R, K] (outer, reduced, inner) with the inner rows combined element-wise, vectorised
//              along inner and tiled so the accumulator row stays in L1 (bias gradients)
// Anything else walks the input once in order, combining into the (pre-initialised)
// output through an odometer. Empty inputs fill the output with the identity.
// Max/min propagate NaN; sums accumulate in the output dtype.
// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsics when Eigen's
// vectorised reductions are inlined here; the warning is about _mm512_undefined_*().
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "core/base/eigen.h"
#include <algorithm>
#include <cassert>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "core/base/step_deadline.h"
#include "core/kernels/split_work.h"
#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

template <class T> using Vec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Sum in blocks: Eigen's vectorised redux inside a block, pairwise between blocks, so
// float error grows with log(n) rather than n for large inputs.
template <class T> T blocked_sum(const T* p, int64_t n) {
  constexpr int64_t kBlock = 2048;
  if (n <= kBlock) return n > 0 ? Vec<T>(p, n).sum() : T(0);
  const int64_t half = ((n / kBlock + 1) / 2) * kBlock;
  return blocked_sum(p, half) + blocked_sum(p + half, n - half);
}

// Past the step's deadline (core/base/step_deadline.h) a kernel skips the rest of its input;
// it asks before each piece of about kDeadlineElems elements, and every piece that runs is
// reduced as without a deadline: rows and column tiles are independent, and a full sum is
// cut only where blocked_sum itself splits.
constexpr int64_t kDeadlineElems = int64_t{1} << 16;

// blocked_sum, asking the deadline before each subtree of at most kDeadlineElems elements
// (0 past it). The same splits, so the same bits, as blocked_sum.
template <class T> T blocked_sum_polled(const T* p, int64_t n, int64_t deadline) {
  constexpr int64_t kBlock = 2048;
  static_assert(kDeadlineElems >= kBlock);
  if (n <= kDeadlineElems) return deadline_passed(deadline) ? T(0) : blocked_sum(p, n);
  const int64_t half = ((n / kBlock + 1) / 2) * kBlock;
  return blocked_sum_polled(p, half, deadline) + blocked_sum_polled(p + half, n - half, deadline);
}

// Rows per ask of the deadline, for rows of `len` elements.
inline int64_t rows_per_poll(int64_t len) { return std::max<int64_t>(1, kDeadlineElems / std::max<int64_t>(1, len)); }

// Each reducer: identity, scalar combine (vectorisable when inlined into a loop) and a
// contiguous-span reduction.
template <class T> struct SumR {
  static T identity() { return T(0); }
  static T combine(T a, T b) { return a + b; }
  static T span(const T* p, int64_t n) { return blocked_sum(p, n); }
};
template <class T> struct MaxR {
  static T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  // A NaN on either side wins (a NaN accumulator is kept: b > NaN is false).
  static T combine(T a, T b) { return ((b > a) | (b != b)) ? b : a; }
  static T span(const T* p, int64_t n) {
    return n > 0 ? Vec<T>(p, n).template maxCoeff<Eigen::PropagateNaN>() : identity();
  }
};
template <class T> struct MinR {
  static T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  static T combine(T a, T b) { return ((b < a) | (b != b)) ? b : a; }
  static T span(const T* p, int64_t n) {
    return n > 0 ? Vec<T>(p, n).template minCoeff<Eigen::PropagateNaN>() : identity();
  }
};
// Booleans are bytes holding 0 or 1.
struct AllR {
  static uint8_t identity() { return 1; }
  static uint8_t combine(uint8_t a, uint8_t b) { return a & b; }
  static uint8_t span(const uint8_t* p, int64_t n) {
    uint8_t acc = 1;
    for (int64_t i = 0; i < n; ++i) acc &= p[i];
    return acc;
  }
};
struct AnyR {
  static uint8_t identity() { return 0; }
  static uint8_t combine(uint8_t a, uint8_t b) { return a | b; }
  static uint8_t span(const uint8_t* p, int64_t n) {
    uint8_t acc = 0;
    for (int64_t i = 0; i < n; ++i) acc |= p[i];
    return acc;
  }
};

// dst[j] = combine(dst[j], src[j]) for j < n.
template <class T, class R>
inline void combine_row(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = R::combine(dst[j], src[j]);
}

// p[0] = n
// A full max or min is not cut: which of two NaNs or of +0 and -0 it returns depends on the
// order it compares them in.
template <class T, class R> void full_kernel(const Instr& in, const Frame& f) {
  const int64_t deadline = thread_step_deadline();
  if constexpr (std::is_same_v<R, SumR<T>>)
    if (deadline != 0) {
      *in.output<T>(f) = blocked_sum_polled(in.in<T>(f, 0), in.p[0], deadline);
      return;
    }
  *in.output<T>(f) = R::span(in.in<T>(f, 0), in.p[0]);
}

// p[0] = rows, p[1] = row length
template <class T, class R> void rows_kernel(const Instr& in, const Frame& f) {
  const T* x = in.in<T>(f, 0);
  T* out = in.output<T>(f);
  const int64_t rows = in.p[0], len = in.p[1];
  const int64_t deadline = thread_step_deadline(), every = rows_per_poll(len);
  // Rows are independent: they split over the intra-op threads with the same bits.
  split_work(rows, rows * len, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if ((r - r0) % every == 0 && deadline_passed(deadline)) [[unlikely]] return;
      out[r] = R::span(x + r * len, len);
    }
  });
}

// Rows shorter than kShortRow (class logits): a scalar fold beats a redux call per row.
constexpr int64_t kShortRow = 16;
template <class T, class R> void short_rows_kernel(const Instr& in, const Frame& f) {
  const T* x = in.in<T>(f, 0);
  T* out = in.output<T>(f);
  const int64_t rows = in.p[0], len = in.p[1];
  const int64_t deadline = thread_step_deadline(), every = rows_per_poll(len);
  split_work(rows, rows * len, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if ((r - r0) % every == 0 && deadline_passed(deadline)) [[unlikely]] return;
      const T* row = x + r * len;
      T acc = row[0];
      for (int64_t i = 1; i < len; ++i) acc = R::combine(acc, row[i]);
      out[r] = acc;
    }
  });
}

// p[0] = outer, p[1] = reduced (>= 1), p[2] = inner
template <class T, class R> void columns_kernel(const Instr& in, const Frame& f) {
  constexpr int64_t kTile = 16384 / sizeof(T);  // accumulator tile: 16 KiB, stays in L1
  const T* x = in.in<T>(f, 0);
  T* out = in.output<T>(f);
  const int64_t outer = in.p[0], red = in.p[1], inner = in.p[2];
  const int64_t deadline = thread_step_deadline();
  // Each output element is its own fold over the reduced rows, whichever columns share its
  // tile, so the (outer group, column tile) pairs split over the intra-op threads with the same
  // bits on any thread count. Tiles of up to kTile columns: not narrower, as threads reading
  // every row's share of its columns would pull lines the producer's threads wrote by rows.
  const int64_t tile = std::min(inner, kTile);
  const int64_t tiles = (inner + tile - 1) / tile;
  split_work(outer * tiles, outer * red * inner, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      if (deadline_passed(deadline)) [[unlikely]] return;  // a tile: red * tile elements
      const int64_t o = u / tiles, j0 = (u % tiles) * tile;
      const int64_t w = std::min(tile, inner - j0);
      T* __restrict d = out + o * inner + j0;
      const T* s = x + o * red * inner + j0;
      std::memcpy(d, s, w * sizeof(T));
      int64_t r = 1;
      for (; r + 4 <= red; r += 4) {  // four rows per pass over the accumulator
        const T* __restrict s0 = s + r * inner;
        const T* __restrict s1 = s0 + inner;
        const T* __restrict s2 = s1 + inner;
        const T* __restrict s3 = s2 + inner;
        for (int64_t j = 0; j < w; ++j)
          d[j] = R::combine(d[j], R::combine(R::combine(s0[j], s1[j]), R::combine(s2[j], s3[j])));
      }
      for (; r < red; ++r) combine_row<T, R>(d, s + r * inner, w);
    }
  });
}

// v = [g, extents[g], out strides[g]] over merged groups (out stride 0 = reduced group).
// The last group is walked contiguously: element-wise when kept, as a span when reduced.
template <class T, class R> void generic_kernel(const Instr& in, const Frame& f) {
  const T* x = in.in<T>(f, 0);
  T* out = in.output<T>(f);
  const int g = static_cast<int>(in.v[0]);
  const int64_t* ext = in.v.data() + 1;
  const int64_t* ostr = ext + g;
  const int64_t n_out = in.p[0], n_in = in.p[1];
  for (int64_t i = 0; i < n_out; ++i) out[i] = R::identity();
  const int64_t last = ext[g - 1];
  const bool last_kept = ostr[g - 1] != 0;
  int64_t idx[kMaxKernelRank] = {};
  int64_t o = 0;
  const int64_t deadline = thread_step_deadline(), every = rows_per_poll(last);
  for (int64_t i = 0, piece = 0; i < n_in; i += last, ++piece) {
    if (piece % every == 0 && deadline_passed(deadline)) [[unlikely]] return;
    if (last_kept) combine_row<T, R>(out + o, x + i, last);
    else out[o] = R::combine(out[o], R::span(x + i, last));
    for (int d = g - 2; d >= 0; --d) {  // advance the odometer over groups [0, g-1)
      o += ostr[d];
      if (++idx[d] < ext[d]) break;
      o -= ostr[d] * ext[d];
      idx[d] = 0;
    }
  }
}

// out = identity (an empty reduction); p[0] = n_out
template <class T, class R> void fill_kernel(const Instr& in, const Frame& f) {
  T* out = in.output<T>(f);
  for (int64_t i = 0; i < in.p[0]; ++i) out[i] = R::identity();
}

// Only extent-1 axes reduced: the values pass through. p[0] = bytes
void copy_kernel(const Instr& in, const Frame& f) {
  std::memcpy(in.output<void>(f), in.in<void>(f, 0), in.p[0]);
}
void noop_kernel(const Instr&, const Frame&) {}

template <class T, class R> bool choose(Instr& instr) {
  const Shape& shape = instr.ins[0].shape;
  const std::vector<int64_t>& axes = instr.attrs.axes;
  const int64_t n_in = instr.ins[0].size(), n_out = instr.out.size();
  if (n_out == 0) {
    instr.fn = noop_kernel;
    return true;
  }
  if (n_in == 0) {
    instr.p[0] = n_out;
    instr.fn = fill_kernel<T, R>;
    return true;
  }
  std::vector<int64_t> ext;
  std::vector<bool> red;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const bool r = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(d));
    if (!ext.empty() && red.back() == r) ext.back() *= shape[d];
    else { ext.push_back(shape[d]); red.push_back(r); }
  }
  const size_t g = ext.size();
  if (std::find(red.begin(), red.end(), true) == red.end()) {
    instr.p[0] = n_in * static_cast<int64_t>(sizeof(T));
    instr.fn = copy_kernel;
  } else if (g == 1) {
    instr.p[0] = n_in;
    instr.fn = full_kernel<T, R>;
  } else if (g == 2 && red[1]) {
    instr.p[0] = ext[0];
    instr.p[1] = ext[1];
    instr.fn = ext[1] < kShortRow ? short_rows_kernel<T, R> : rows_kernel<T, R>;
  } else if ((g == 2 && red[0]) || (g == 3 && red[1])) {
    instr.p[0] = g == 3 ? ext[0] : 1;
    instr.p[1] = ext[g - 2];
    instr.p[2] = ext[g - 1];
    instr.fn = columns_kernel<T, R>;
  } else {
    if (g > kMaxKernelRank) throw std::logic_error("reduce: too many dimensions after merging");
    instr.v.assign(1 + 2 * g, 0);
    instr.v[0] = static_cast<int64_t>(g);
    int64_t stride = 1;
    for (size_t d = g; d-- > 0;) {
      instr.v[1 + d] = ext[d];
      instr.v[1 + g + d] = red[d] ? 0 : stride;
      if (!red[d]) stride *= ext[d];
    }
    instr.p[0] = n_out;
    instr.p[1] = n_in;
    instr.fn = generic_kernel<T, R>;
  }
  return true;
}

template <template <class> class R> bool choose_numeric(Instr& instr) {
  switch (instr.out.dtype) {
    case DType::f32: return choose<float, R<float>>(instr);
    case DType::f64: return choose<double, R<double>>(instr);
    case DType::i32: return choose<int32_t, R<int32_t>>(instr);
    default: return false;
  }
}

}  // namespace

bool select_reduce(Instr& instr) {
  assert(instr.ins.size() == 1 && instr.ins[0].dtype == instr.out.dtype);
  assert(std::is_sorted(instr.attrs.axes.begin(), instr.attrs.axes.end()));
  switch (instr.op) {
    case Op::ReduceSum: return choose_numeric<SumR>(instr);
    case Op::ReduceMax: return choose_numeric<MaxR>(instr);
    case Op::ReduceMin: return choose_numeric<MinR>(instr);
    case Op::ReduceAll:
      return instr.out.dtype == DType::boolean && choose<uint8_t, AllR>(instr);
    case Op::ReduceAny:
      return instr.out.dtype == DType::boolean && choose<uint8_t, AnyR>(instr);
    default: return false;
  }
}

}  // namespace fjit::kernels::st
