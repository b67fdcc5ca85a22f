// ArgMax and ArgMin along one axis: the first index of the maximum (minimum), where a NaN
// counts as the extreme (so the first NaN wins). Output i32.
//
// The input is viewed as (outer, n, inner). With inner == 1 each row is scanned; otherwise
// the scan is vectorised along inner, keeping the running maxima of a tile on the stack.
#include <algorithm>
#include <cassert>

#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

// True when v replaces the current best b: b is not NaN and (v is NaN or v beats b).
template <bool Max, class T> inline bool takes(T v, T b) {
  if constexpr (Max) return (b == b) & ((v > b) | (v != v));
  else return (b == b) & ((v < b) | (v != v));
}

// p: [0]=outer [1]=n [2]=inner
template <bool Max, class T> void arg_rows(const Instr& in, const Frame& f) {
  const T* x = in.in<T>(f, 0);
  int32_t* out = in.output<int32_t>(f);
  const int64_t outer = in.p[0], n = in.p[1];
  for (int64_t o = 0; o < outer; ++o) {
    const T* row = x + o * n;
    int64_t best = 0;
    T bv = row[0];
    for (int64_t i = 1; i < n && bv == bv; ++i) {
      if (takes<Max>(row[i], bv)) {
        bv = row[i];
        best = i;
      }
    }
    out[o] = static_cast<int32_t>(best);
  }
}

template <bool Max, class T> void arg_inner(const Instr& in, const Frame& f) {
  constexpr int64_t kTile = 256;
  const T* x = in.in<T>(f, 0);
  int32_t* out = in.output<int32_t>(f);
  const int64_t outer = in.p[0], n = in.p[1], inner = in.p[2];
  T best[kTile];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j0 = 0; j0 < inner; j0 += kTile) {
      const int64_t w = std::min(kTile, inner - j0);
      const T* src = x + o * n * inner + j0;
      int32_t* __restrict idx = out + o * inner + j0;
      for (int64_t j = 0; j < w; ++j) {
        best[j] = src[j];
        idx[j] = 0;
      }
      for (int64_t i = 1; i < n; ++i) {
        const T* __restrict row = src + i * inner;
        for (int64_t j = 0; j < w; ++j) {
          const bool t = takes<Max>(row[j], best[j]);
          best[j] = t ? row[j] : best[j];
          idx[j] = t ? static_cast<int32_t>(i) : idx[j];
        }
      }
    }
  }
}

void noop_kernel(const Instr&, const Frame&) {}

template <class T> KernelFn pick(bool max, int64_t inner) {
  if (max) return inner == 1 ? arg_rows<true, T> : arg_inner<true, T>;
  return inner == 1 ? arg_rows<false, T> : arg_inner<false, T>;
}

}  // namespace

bool select_argmax(Instr& instr) {
  assert((instr.op == Op::ArgMax || instr.op == Op::ArgMin) && instr.ins.size() == 1 && instr.out.dtype == DType::i32);
  const Shape& s = instr.ins[0].shape;
  const int64_t axis = instr.attrs.axis;
  assert(axis >= 0 && axis < static_cast<int64_t>(s.size()));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  instr.p[0] = outer;
  instr.p[1] = s[axis];
  instr.p[2] = inner;
  if (instr.out.size() == 0) {
    instr.fn = noop_kernel;
    return true;
  }
  assert(s[axis] > 0);  // shape rule: argmax over an empty axis is rejected
  const bool max = instr.op == Op::ArgMax;
  switch (instr.ins[0].dtype) {
    case DType::f32: instr.fn = pick<float>(max, inner); return true;
    case DType::f64: instr.fn = pick<double>(max, inner); return true;
    case DType::i32: instr.fn = pick<int32_t>(max, inner); return true;
    default: return false;
  }
}

}  // namespace fjit::kernels::st
