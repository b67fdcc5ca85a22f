// Reference kernels for cumsum and top_k: a running sum over each line's multi-indices, and a
// stable sort of each row's indices (sharing nothing with the heap of the fast kernel).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/kernels/structural/structural.h"
#include "core/kernels/structural/structural_reference.h"

namespace fjit::kernels::st {
namespace {
using ref::get;
using ref::ravel;
using ref::set;
using ref::unravel;

// Each partial sum is rounded to the dtype before the next element is added (a double holds
// the exact sum of two f32 values, so f32 sums round as f32 additions do).
void cumsum(const Attrs& at, const Array& x, Array& result) {
  const Shape& s = x.shape();
  const int64_t n = s[at.axis];
  for (int64_t i = 0; i < x.size(); ++i) {
    std::vector<int64_t> idx = unravel(i, s);
    if (idx[at.axis] != (at.reverse ? n - 1 : 0)) continue;  // one line per start
    double acc = 0;
    for (int64_t step = 0; step < n; ++step) {
      idx[at.axis] = at.reverse ? n - 1 - step : step;
      const int64_t flat = ravel(idx, s);
      acc += get(x, flat);
      if (x.dtype() == DType::i32) acc = static_cast<double>(static_cast<int32_t>(static_cast<int64_t>(acc)));
      set(result, flat, acc);
      acc = get(result, flat);
    }
  }
}

void top_k(const Attrs& at, const Array& x, Array& result) {
  const int64_t n = x.shape().back(), k = at.index;
  const int64_t rows = n == 0 ? 0 : x.size() / n;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    // Descending, NaN first; std::stable_sort keeps equal values in index order.
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double va = get(x, r * n + a), vb = get(x, r * n + b);
      if (std::isnan(va) || std::isnan(vb)) return std::isnan(va) && !std::isnan(vb);
      return va > vb;
    });
    for (int64_t j = 0; j < k; ++j) set(result, r * k + j, static_cast<double>(order[j]));
  }
}

}  // namespace

bool reference_cumsum_top_k(Op op, const Attrs& attrs, std::span<const Array> ins, Array& result) {
  switch (op) {
    case Op::Cumsum: cumsum(attrs, ins[0], result); return true;
    case Op::TopK: top_k(attrs, ins[0], result); return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
