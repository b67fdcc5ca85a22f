// Gather (take along one axis) and its adjoint ScatterAdd.
//
// Both view the operand x as (outer, n, inner) around the axis and the indices as a flat
// list of J entries; the gathered side is (outer, J, inner).
//   gather:      out[o, j, :] = x[o, clamp(idx[j], 0, n-1), :]   (XLA clamping: never reads
//                out of bounds; the checks subsystem reports bad indices separately)
//   scatter_add: out = 0; out[o, idx[j], :] += upd[o, j, :] for idx[j] in [0, n), in j order;
//                out-of-range indices are dropped
// Rows (inner > 1: embeddings, axis-0 gathers) move with memcpy / a vectorised add; inner == 1
// (gathering along the last axis) moves single elements.
#include <algorithm>
#include <cassert>

#include "core/kernels/structural/structural.h"

namespace fjit::kernels::st {
namespace {

inline int64_t clamp_index(int32_t i, int64_t n) {
  return i < 0 ? 0 : (i >= n ? n - 1 : static_cast<int64_t>(i));
}

// p: [0]=outer [1]=n [2]=J [3]=inner
template <class W> struct GatherRows {
  static void run(const Instr& in, const Frame& f) {
    const W* x = in.in<W>(f, 0);
    const int32_t* idx = in.in<int32_t>(f, 1);
    W* out = in.output<W>(f);
    const int64_t outer = in.p[0], n = in.p[1], J = in.p[2], inner = in.p[3];
    for (int64_t o = 0; o < outer; ++o) {
      const W* src = x + o * n * inner;
      for (int64_t j = 0; j < J; ++j, out += inner)
        std::memcpy(out, src + clamp_index(idx[j], n) * inner, inner * sizeof(W));
    }
  }
};
template <class W> struct GatherElems {
  static void run(const Instr& in, const Frame& f) {
    const W* x = in.in<W>(f, 0);
    const int32_t* idx = in.in<int32_t>(f, 1);
    W* out = in.output<W>(f);
    const int64_t outer = in.p[0], n = in.p[1], J = in.p[2];
    for (int64_t o = 0; o < outer; ++o, out += J, x += n)
      for (int64_t j = 0; j < J; ++j) out[j] = x[clamp_index(idx[j], n)];
  }
};

// Addition for numbers; logical or for bool bytes.
template <class T> inline T accumulate(T a, T b) {
  if constexpr (std::is_same_v<T, uint8_t>) return a | b;
  else return a + b;
}

template <class T> void scatter_add_kernel(const Instr& in, const Frame& f) {
  const T* upd = in.in<T>(f, 0);
  const int32_t* idx = in.in<int32_t>(f, 1);
  T* out = in.output<T>(f);
  const int64_t outer = in.p[0], n = in.p[1], J = in.p[2], inner = in.p[3];
  std::memset(out, 0, outer * n * inner * sizeof(T));
  for (int64_t o = 0; o < outer; ++o) {
    T* dst_base = out + o * n * inner;
    for (int64_t j = 0; j < J; ++j, upd += inner) {
      const int32_t k = idx[j];
      if (k < 0 || k >= n) continue;
      T* __restrict dst = dst_base + k * inner;
      const T* __restrict src = upd;
      for (int64_t c = 0; c < inner; ++c) dst[c] = accumulate(dst[c], src[c]);
    }
  }
}

// Gathering from an empty axis (n == 0) into a non-empty output: zeros. p[0] = bytes.
void zero_kernel(const Instr& in, const Frame& f) { std::memset(in.output<void>(f), 0, in.p[0]); }
void noop_kernel(const Instr&, const Frame&) {}

}  // namespace

bool select_index(Instr& instr) {
  assert(instr.ins.size() == 2 && instr.ins[1].dtype == DType::i32);
  const int64_t axis = instr.attrs.axis;
  const bool gather = instr.op == Op::Gather;
  // The operand around the axis: x for gather, the output for scatter_add.
  const Shape& xs = gather ? instr.ins[0].shape : instr.out.shape;
  assert(axis >= 0 && axis < static_cast<int64_t>(xs.size()));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= xs[d];
  for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  const int64_t n = xs[axis], J = instr.ins[1].size();
  assert((gather ? instr.out.size() : instr.ins[0].size()) == outer * J * inner);
  assert(instr.ins[0].dtype == instr.out.dtype);
  instr.p[0] = outer;
  instr.p[1] = n;
  instr.p[2] = J;
  instr.p[3] = inner;
  if (instr.out.size() == 0) {
    instr.fn = noop_kernel;
    return true;
  }
  if (gather) {
    if (n == 0) {
      instr.p[0] = instr.out.size() * dtype_size(instr.out.dtype);
      instr.fn = zero_kernel;
    } else if (inner == 1) {
      instr.fn = by_element_size<GatherElems>(instr.out.dtype);
    } else {
      instr.fn = by_element_size<GatherRows>(instr.out.dtype);
    }
    return true;
  }
  switch (instr.out.dtype) {
    case DType::f32: instr.fn = scatter_add_kernel<float>; return true;
    case DType::f64: instr.fn = scatter_add_kernel<double>; return true;
    case DType::i32: instr.fn = scatter_add_kernel<int32_t>; return true;
    case DType::boolean: instr.fn = scatter_add_kernel<uint8_t>; return true;
    default: return false;
  }
  return false;
}

}  // namespace fjit::kernels::st
