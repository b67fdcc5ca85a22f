// Cumsum along one axis and top_k along the last axis (core/trace/ops.h).
//
// cumsum views its operand as (outer, n, inner) and sums each column of a row block in order
// (from the end when reversed), vectorised along inner; i32 sums wrap. top_k keeps, per row, a
// heap of the k best indices so far in the output row itself (no scratch), then sorts it: best
// first, where larger is better, NaN is larger than any number, and of equal values the lower
// index is better. Both are single-threaded and sum or compare in a fixed order, so their bits
// never depend on the thread count.
#include <algorithm>
#include <cassert>
#include <type_traits>

#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

// The sum of two elements; i32 wraps instead of overflowing.
template <class T> inline T plus(T a, T b) {
  if constexpr (std::is_same_v<T, int32_t>)
    return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
  else return a + b;
}

// p: [0]=outer [1]=n [2]=inner [3]=reverse
template <class T> void cumsum_kernel(const Instr& in, const Frame& f) {
  const T* x = in.in<T>(f, 0);
  T* y = in.output<T>(f);
  const int64_t outer = in.p[0], n = in.p[1], inner = in.p[2];
  const bool reverse = in.p[3] != 0;
  for (int64_t o = 0; o < outer; ++o) {
    const T* xb = x + o * n * inner;
    T* yb = y + o * n * inner;
    for (int64_t step = 0; step < n; ++step) {
      const int64_t i = reverse ? n - 1 - step : step;
      const T* __restrict xr = xb + i * inner;
      T* __restrict yr = yb + i * inner;
      if (step == 0) {
        for (int64_t j = 0; j < inner; ++j) yr[j] = xr[j];
        continue;
      }
      const T* __restrict prev = yb + (reverse ? i + 1 : i - 1) * inner;
      for (int64_t j = 0; j < inner; ++j) yr[j] = plus(prev[j], xr[j]);
    }
  }
}

// Whether element a of `row` ranks before element b (a strict total order).
template <class T> inline bool better(const T* row, int32_t a, int32_t b) {
  const T va = row[a], vb = row[b];
  if constexpr (std::is_floating_point_v<T>) {
    const bool na = va != va, nb = vb != vb;
    if (na || nb) return na && nb ? a < b : na;
  }
  return va > vb || (va == vb && a < b);
}

// p: [0]=rows [1]=n [2]=k
template <class T> void top_k_kernel(const Instr& in, const Frame& f) {
  const T* x = in.in<T>(f, 0);
  int32_t* out = in.output<int32_t>(f);
  const int64_t rows = in.p[0], n = in.p[1], k = in.p[2];
  if (k == 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * n;
    int32_t* heap = out + r * k;
    // A heap whose top is the worst of the k kept: `better` is its "less than".
    auto cmp = [row](int32_t a, int32_t b) { return better(row, a, b); };
    int64_t size = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t idx = static_cast<int32_t>(i);
      if (size < k) {
        heap[size++] = idx;
        std::push_heap(heap, heap + size, cmp);
      } else if (better(row, idx, heap[0])) {
        std::pop_heap(heap, heap + size, cmp);
        heap[size - 1] = idx;
        std::push_heap(heap, heap + size, cmp);
      }
    }
    std::sort_heap(heap, heap + size, cmp);  // best first
  }
}

template <template <class> class K> KernelFn by_dtype(DType t) {
  switch (t) {
    case DType::f32: return K<float>::run;
    case DType::f64: return K<double>::run;
    case DType::i32: return K<int32_t>::run;
    default: return nullptr;
  }
}
template <class T> struct Cumsum { static void run(const Instr& i, const Frame& f) { cumsum_kernel<T>(i, f); } };
template <class T> struct TopK { static void run(const Instr& i, const Frame& f) { top_k_kernel<T>(i, f); } };

}  // namespace

bool select_cumsum(Instr& instr) {
  assert(instr.op == Op::Cumsum && instr.ins.size() == 1);
  const Shape& s = instr.ins[0].shape;
  const int64_t axis = instr.attrs.axis;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  instr.p[0] = outer;
  instr.p[1] = s[axis];
  instr.p[2] = inner;
  instr.p[3] = instr.attrs.reverse ? 1 : 0;
  instr.fn = by_dtype<Cumsum>(instr.ins[0].dtype);
  return instr.fn != nullptr;
}

bool select_top_k(Instr& instr) {
  assert(instr.op == Op::TopK && instr.ins.size() == 1 && instr.out.dtype == DType::i32);
  const Shape& s = instr.ins[0].shape;
  const int64_t n = s.back();
  instr.p[0] = n == 0 ? 0 : instr.ins[0].size() / n;
  instr.p[1] = n;
  instr.p[2] = instr.attrs.index;
  instr.fn = by_dtype<TopK>(instr.ins[0].dtype);
  return instr.fn != nullptr;
}

}  // namespace fjit::kernels::st
