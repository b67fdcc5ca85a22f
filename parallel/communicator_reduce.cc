#include "parallel/communicator_reduce.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/ir/convert.h"

// Without AVX-512, GCC notes (-Wpsabi) that passing a 64-byte vector by value has another ABI
// than with it. Every function here is internal to this file (an anonymous namespace), so no
// call crosses an ABI boundary and the note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace fjit {
namespace {

// 64-byte vectors through GCC's vector extensions (one AVX-512 register where the build
// targets AVX-512, split by the compiler otherwise). Every op below exists for scalars and vectors with the
// same per-element semantics, so the vector body and the scalar tail agree bit for bit.
template <class T> struct VecOf;
template <> struct VecOf<float> { typedef float type __attribute__((vector_size(64))); };
template <> struct VecOf<double> { typedef double type __attribute__((vector_size(64))); };
template <> struct VecOf<int32_t> { typedef int32_t type __attribute__((vector_size(64))); };
template <> struct VecOf<uint32_t> { typedef uint32_t type __attribute__((vector_size(64))); };
template <> struct VecOf<uint8_t> { typedef uint8_t type __attribute__((vector_size(64))); };
template <class T> using Vec = typename VecOf<T>::type;

// Vector comparisons give lane masks, combined with | and selected with ?: (GCC's spelling).
template <class T> struct Sum {
  static T first(T a) { return a; }
  static Vec<T> first(Vec<T> a) { return a; }
  static T apply(T a, T b) {
    if constexpr (std::is_same_v<T, int32_t>) {  // wraps: signed overflow is undefined
      return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
    } else {
      return a + b;
    }
  }
  static Vec<T> apply(Vec<T> a, Vec<T> b) {
    if constexpr (std::is_same_v<T, int32_t>) {
      return (Vec<T>)((Vec<uint32_t>)a + (Vec<uint32_t>)b);
    } else {
      return a + b;
    }
  }
};
// `a != a` is the NaN test that keeps NaN sticky; for integers it is always false.
template <class T> struct Max {
  static T first(T a) { return a; }
  static Vec<T> first(Vec<T> a) { return a; }
  static T apply(T a, T b) { return (a > b || a != a) ? a : b; }
  static Vec<T> apply(Vec<T> a, Vec<T> b) { return ((a > b) | (a != a)) ? a : b; }
};
template <class T> struct Min {
  static T first(T a) { return a; }
  static Vec<T> first(Vec<T> a) { return a; }
  static T apply(T a, T b) { return (a < b || a != a) ? a : b; }
  static Vec<T> apply(Vec<T> a, Vec<T> b) { return ((a < b) | (a != a)) ? a : b; }
};
template <class T> struct Or {
  static T first(T a) { return a != T(0) ? T(1) : T(0); }
  static Vec<T> first(Vec<T> a) {
    const Vec<T> zero{}, one = zero + 1;
    return (a != zero) ? one : zero;
  }
  static T apply(T a, T b) { return (a != T(0) || b != T(0)) ? T(1) : T(0); }
  static Vec<T> apply(Vec<T> a, Vec<T> b) {
    const Vec<T> zero{}, one = zero + 1;
    return ((a != zero) | (b != zero)) ? one : zero;
  }
};

template <class T> Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T> void store(T* p, Vec<T> v) { std::memcpy(p, &v, sizeof v); }

// Two vectors at a time, all inputs then all outputs, held in registers: inputs are read
// once, nothing is staged through memory, and reading before writing makes in-place safe.
// NIN/NOUT > 0 fix the counts at compile time (pointers then live in registers, which makes
// the common small groups markedly faster, bench/RESULTS.md); 0 means "given at run time".
template <class T, class Op, int NIN, int NOUT>
void combine_typed(const void* const* inputs, int n_in, void* const* outputs, int n_out,
                   int64_t begin, int64_t count) {
  constexpr int kMaxFixed = 8;
  const int ni = NIN > 0 ? NIN : n_in;
  const int no = NOUT > 0 ? NOUT : n_out;
  // Local copies: the stores below cannot alias them, so they are not reloaded per vector.
  const T* in_fixed[kMaxFixed];
  T* out_fixed[kMaxFixed];
  const T* const* in = reinterpret_cast<const T* const*>(inputs);
  T* const* out = reinterpret_cast<T* const*>(outputs);
  if constexpr (NIN > 0) {
    for (int r = 0; r < NIN; ++r) in_fixed[r] = in[r];
    in = in_fixed;
  }
  if constexpr (NOUT > 0) {
    for (int k = 0; k < NOUT; ++k) out_fixed[k] = out[k];
    out = out_fixed;
  }
  constexpr int64_t W = 64 / sizeof(T);
  const int64_t end = begin + count;
  int64_t j = begin;
  for (; j + 2 * W <= end; j += 2 * W) {
    Vec<T> a = Op::first(load(in[0] + j));
    Vec<T> b = Op::first(load(in[0] + j + W));
    for (int r = 1; r < ni; ++r) {
      a = Op::apply(a, load(in[r] + j));
      b = Op::apply(b, load(in[r] + j + W));
    }
    for (int k = 0; k < no; ++k) {
      store(out[k] + j, a);
      store(out[k] + j + W, b);
    }
  }
  for (; j < end; ++j) {
    T a = Op::first(in[0][j]);
    for (int r = 1; r < ni; ++r) a = Op::apply(a, in[r][j]);
    for (int k = 0; k < no; ++k) out[k][j] = a;
  }
}

// The shapes that occur: the thread backend writes every replica's buffer (n_out == n_in),
// the MPI backend its own (n_out == 1).
template <class T, class Op>
void combine_shape(const void* const* in, int n_in, void* const* out, int n_out, int64_t begin,
                   int64_t count) {
#define FJIT_FIXED(NI, NO) \
  if (n_in == NI && n_out == NO) return combine_typed<T, Op, NI, NO>(in, n_in, out, n_out, begin, count)
  FJIT_FIXED(2, 2); FJIT_FIXED(3, 3); FJIT_FIXED(4, 4);
  FJIT_FIXED(1, 1); FJIT_FIXED(2, 1); FJIT_FIXED(3, 1); FJIT_FIXED(4, 1);
#undef FJIT_FIXED
  combine_typed<T, Op, 0, 0>(in, n_in, out, n_out, begin, count);
}

template <class T>
void combine_op(const void* const* in, int n_in, void* const* out, int n_out, int64_t begin,
                int64_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return combine_shape<T, Sum<T>>(in, n_in, out, n_out, begin, count);
    case ReduceOp::max: return combine_shape<T, Max<T>>(in, n_in, out, n_out, begin, count);
    case ReduceOp::min: return combine_shape<T, Min<T>>(in, n_in, out, n_out, begin, count);
    case ReduceOp::logical_or:
      return combine_shape<T, Or<T>>(in, n_in, out, n_out, begin, count);
  }
  std::abort();
}

// f16 sums (gradients carried in half precision): each partial sum is computed in f32 and
// rounded to f16, which is the correctly rounded f16 sum (f32's 24 bits are enough for one
// rounding of an f16 addition to be exact); past 65504 it is inf, as f16 arithmetic would give.
void sum_f16(const void* const* inputs, int n_in, void* const* outputs, int n_out, int64_t begin,
             int64_t count) {
  constexpr int64_t kTile = 256;  // a tile is read completely before any output is written
  f16_t tile[kTile];
  for (int64_t t = begin; t < begin + count; t += kTile) {
    const int64_t n = std::min(kTile, begin + count - t);
    for (int64_t j = 0; j < n; ++j) {
      f16_t a = static_cast<const f16_t*>(inputs[0])[t + j];
      for (int r = 1; r < n_in; ++r)
        a = convert_element<f16_t>(widen(a) + widen(static_cast<const f16_t*>(inputs[r])[t + j]));
      tile[j] = a;
    }
    for (int k = 0; k < n_out; ++k) std::memcpy(static_cast<f16_t*>(outputs[k]) + t, tile, n * sizeof(f16_t));
  }
}

}  // namespace

void combine_in_rank_order(const void* const* inputs, int n_inputs, void* const* outputs,
                           int n_outputs, int64_t begin, int64_t count, DType dtype,
                           ReduceOp op) {
  if (count <= 0) return;
  switch (dtype) {
    case DType::f32:
      return combine_op<float>(inputs, n_inputs, outputs, n_outputs, begin, count, op);
    case DType::f64:
      return combine_op<double>(inputs, n_inputs, outputs, n_outputs, begin, count, op);
    case DType::i32:
      return combine_op<int32_t>(inputs, n_inputs, outputs, n_outputs, begin, count, op);
    case DType::boolean:
      // Booleans stay 0/1: a byte-wise sum could overflow into 2, which is not a boolean.
      if (op == ReduceOp::sum) op = ReduceOp::logical_or;
      return combine_op<uint8_t>(inputs, n_inputs, outputs, n_outputs, begin, count, op);
    case DType::f16:
      if (op == ReduceOp::sum) return sum_f16(inputs, n_inputs, outputs, n_outputs, begin, count);
      break;
    default: break;  // other storage dtypes are gathered, never combined (the shape rule)
  }
  std::abort();
}

bool single_contribution_changes(DType dtype, ReduceOp op) {
  return op == ReduceOp::logical_or || (dtype == DType::boolean && op == ReduceOp::sum);
}

ElementRange chunk_of(int64_t count, int parts, int part, int elem_size) {
  const int64_t align = std::max<int64_t>(1, 64 / elem_size);
  int64_t chunk = (count + parts - 1) / parts;
  chunk = (chunk + align - 1) / align * align;
  ElementRange r;
  r.begin = std::min(count, chunk * part);
  r.count = std::min(count, r.begin + chunk) - r.begin;
  return r;
}

}  // namespace fjit
