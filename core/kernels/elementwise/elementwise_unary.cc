// Fast kernels for sources (constant, iota) and one-operand elementwise ops. Unary ops never
// broadcast: the operand has the output's shape, so every kernel is one pass over n elements.
// Float math goes through Eigen's vectorized functions; the ops whose rules Eigen does not
// express (sign with NaN, wrapping i32, saturating casts, bool results) are plain loops that
// g++ vectorizes.
#include <bit>
#include <cstring>
#include <limits>

#include "core/base/eigen.h"  // first: it silences the intrinsics headers' false positives
#include <unsupported/Eigen/SpecialFunctions>

#include "core/base/isa.h"
#include "core/kernels/elementwise/cast_bf16.h"
#include "core/kernels/elementwise/elementwise_common.h"
#include "core/kernels/elementwise/elementwise_sqrt.h"
#include "core/kernels/elementwise/elementwise_scalar.h"

namespace fjit::kernels::ew {
namespace {

// --- Eigen float kernels: out = F::eval(x) over the whole buffer.
struct NegE { template <class X> static auto eval(const X& x) { return -x; } };
struct AbsE { template <class X> static auto eval(const X& x) { return x.abs(); } };
struct ExpE { template <class X> static auto eval(const X& x) { return x.exp(); } };
struct LogE { template <class X> static auto eval(const X& x) { return x.log(); } };
struct Log1pE { template <class X> static auto eval(const X& x) { return x.log1p(); } };
struct RsqrtE { template <class X> static auto eval(const X& x) { return x.rsqrt(); } };
struct TanhE { template <class X> static auto eval(const X& x) { return x.tanh(); } };
struct SinE { template <class X> static auto eval(const X& x) { return x.sin(); } };
struct CosE { template <class X> static auto eval(const X& x) { return x.cos(); } };
// Eigen's erf: a vectorized rational approximation in f32, std::erf per element in f64.
struct ErfE { template <class X> static auto eval(const X& x) { return x.erf(); } };
// GELU, (x * 0.5) * (erf(x * 1/sqrt(2)) + 1), each step rounded as nn's composite of these ops
// rounds it; its derivative (erf(x/sqrt(2)) + 1) * 0.5 + x * exp(-x^2 / 2) / sqrt(2 pi).
struct GeluE {
  template <class X> static auto eval(const X& x) {
    using T = typename X::Scalar;
    return (x * T(0.5)) * ((x * T(M_SQRT1_2)).erf() + T(1));
  }
};
struct GeluGradE {
  template <class X> static auto eval(const X& x) {
    using T = typename X::Scalar;
    return ((x * T(M_SQRT1_2)).erf() + T(1)) * T(0.5) +
           x * ((x * x) * T(-0.5)).exp() * T(0.3989422804014327);
  }
};
// Stable for large |x|: Eigen's f32 logistic is exp(x) below -9 and saturates to 1 above
// ~15.7; its f64 one is 1/(1+exp(-x)), which gives 1/inf = 0 for x << 0, never NaN.
struct SigmoidE { template <class X> static auto eval(const X& x) { return x.logistic(); } };
struct SqrtE {
  template <class X> static auto eval(const X& x) {
    return x.unaryExpr(SqrtOp<typename X::Scalar>());
  }
};

template <class F, class T>
void unary_eigen(const Instr& in, const Frame& f) {
  const int64_t n = in.p[0];
  OutMap<T>(in.output<T>(f), n) = F::eval(InMap<T>(in.in<T>(f, 0), n));
}

template <class F>
KernelFn float_unary(DType t) {
  if (t == DType::f32) return &unary_eigen<F, float>;
  if (t == DType::f64) return &unary_eigen<F, double>;
  return nullptr;
}

// --- Plain-loop kernels: out[i] = F::apply(x[i]), large ones in pieces over the intra-op
// threads (each element alone: the same bits on any thread count).
struct SignL {
  template <class T> static T apply(T x) { return x > T(0) ? T(1) : x < T(0) ? T(-1) : x; }
};
struct NegI {
  static int32_t apply(int32_t x) { return static_cast<int32_t>(0u - static_cast<uint32_t>(x)); }
};
struct AbsI {
  static int32_t apply(int32_t x) {
    return x < 0 ? static_cast<int32_t>(0u - static_cast<uint32_t>(x)) : x;
  }
};
// max(x, 0) with relu(NaN) = NaN: one compare and a blend (cheaper than Eigen's NaN-aware max).
struct ReluL {
  template <class T> static T apply(T x) { return !(x <= T(0)) ? x : T(0); }
};
struct IsFiniteL {
  static uint8_t apply(float x) {
    return (std::bit_cast<uint32_t>(x) & 0x7f800000u) != 0x7f800000u;
  }
  static uint8_t apply(double x) {
    return (std::bit_cast<uint64_t>(x) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
  }
};
struct NotL { static uint8_t apply(uint8_t x) { return x == 0; } };
template <class To> struct CastL {
  template <class From> static To apply(From x) { return convert_element<To>(x); }
};

template <class F, class To, class From>
void unary_loop(const Instr& in, const Frame& f) {
  const From* x = in.in<From>(f, 0);
  To* o = in.output<To>(f);
  const int64_t n = in.p[0];
  for_each_piece(n, 2 * n, [=](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) o[i] = F::apply(x[i]);
  });
}

template <class F>
KernelFn numeric_loop(DType t) {
  if (t == DType::f32) return &unary_loop<F, float, float>;
  if (t == DType::f64) return &unary_loop<F, double, double>;
  if (t == DType::i32) return &unary_loop<F, int32_t, int32_t>;
  return nullptr;
}

void all_true_kernel(const Instr& in, const Frame& f) {
  std::memset(in.output<uint8_t>(f), 1, static_cast<size_t>(in.p[0]));
}

// Same-dtype cast: a copy (memmove: the planner may hand it the operand's own buffer).
void copy_kernel(const Instr& in, const Frame& f) {
  std::memmove(f.bufs[in.out_buf], f.bufs[in.in_bufs[0]], static_cast<size_t>(in.p[1]));
}

// f32 -> bf16 (the mixed-precision policy's casts): cast_bf16.h's rounding, portable or with
// VCVTNEPS2BF16 where the CPU has it (the same bits), in pieces over the intra-op threads.
template <void (*Round)(const uint32_t*, uint16_t*, int64_t)>
void cast_f32_to_bf16_kernel(const Instr& in, const Frame& f) {
  const auto* x = in.in<uint32_t>(f, 0);
  auto* o = in.output<uint16_t>(f);
  const int64_t n = in.p[0];
  for_each_piece(n, 2 * n, [=](int64_t a, int64_t b) { Round(x + a, o + a, b - a); });
}

KernelFn cast_kernel(DType from, DType to) {
  if (from == to) return &copy_kernel;
  if (from == DType::f32 && to == DType::bf16)
    return active_avx512_bf16() ? &cast_f32_to_bf16_kernel<round_f32_to_bf16_avx512>
                                : &cast_f32_to_bf16_kernel<round_f32_to_bf16_portable>;
  return visit_dtype(from, [to](auto from_tag) {
    return visit_dtype(to, [](auto to_tag) -> KernelFn {
      using From = decltype(from_tag);
      using To = decltype(to_tag);
      return &unary_loop<CastL<To>, To, From>;
    });
  });
}

// --- Sources.
template <class T>
void fill_kernel(const Instr& in, const Frame& f) {
  T v;
  std::memcpy(&v, &in.p[1], sizeof(T));
  T* o = in.output<T>(f);
  for (int64_t i = 0, n = in.p[0]; i < n; ++i) o[i] = v;
}

void constant_data_kernel(const Instr& in, const Frame& f) {
  std::memcpy(f.bufs[in.out_buf], in.attrs.value->raw(), in.attrs.value->nbytes());
}

template <class T>
KernelFn prepare_fill(Instr& instr) {
  const T v = convert_element<T>(instr.attrs.scalar);
  std::memcpy(&instr.p[1], &v, sizeof(T));
  return &fill_kernel<T>;
}

// out[outer][a][inner] = a, for a in [0, extent).
template <class T>
void iota_kernel(const Instr& in, const Frame& f) {
  const int64_t outer = in.p[0], extent = in.p[1], inner = in.p[2];
  T* o = in.output<T>(f);
  for (int64_t i = 0; i < outer; ++i)
    for (int64_t a = 0; a < extent; ++a) {
      const T v = convert_element<T>(a);
      for (int64_t j = 0; j < inner; ++j) *o++ = v;
    }
}

}  // namespace

bool select_source(Instr& instr) {
  const DType t = instr.out.dtype;
  if (instr.op == Op::Constant) {
    instr.p[0] = instr.out.size();
    if (instr.attrs.value) {
      const Array& v = *instr.attrs.value;
      instr.fn = v.dtype() == t && v.shape() == instr.out.shape ? &constant_data_kernel : nullptr;
      return true;
    }
    instr.fn = visit_dtype(t, [&](auto tag) { return prepare_fill<decltype(tag)>(instr); });
    return true;
  }
  if (instr.op == Op::Iota) {
    const Shape& s = instr.out.shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    const int64_t axis = instr.attrs.axis;
    instr.fn = nullptr;
    if (rank == 0 ? axis != 0 : axis < 0 || axis >= rank) return true;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= s[d];
    for (int64_t d = axis + 1; d < rank; ++d) inner *= s[d];
    instr.p[0] = outer;
    instr.p[1] = rank == 0 ? 1 : s[axis];
    instr.p[2] = inner;
    instr.fn = visit_dtype(t, [](auto tag) -> KernelFn { return &iota_kernel<decltype(tag)>; });
    return true;
  }
  return false;
}

bool select_unary(Instr& instr) {
  if (op_kind(instr.op) != OpKind::kUnary && instr.op != Op::LogicalNot) return false;
  instr.fn = nullptr;
  const DType t = instr.ins.at(0).dtype, to = instr.out.dtype;
  if (instr.ins[0].shape != instr.out.shape) return true;  // unary ops never broadcast
  instr.p[0] = instr.out.size();
  instr.p[1] = instr.out.size() * dtype_size(t);
  if (instr.op == Op::Cast) {
    instr.fn = cast_kernel(t, to);
    return true;
  }
  if (instr.op == Op::IsFinite) {
    if (to != DType::boolean) return true;
    if (t == DType::f32) instr.fn = &unary_loop<IsFiniteL, uint8_t, float>;
    if (t == DType::f64) instr.fn = &unary_loop<IsFiniteL, uint8_t, double>;
    if (t == DType::i32) instr.fn = &all_true_kernel;
    return true;
  }
  if (t != to) return true;
  switch (instr.op) {
    case Op::Neg:
      instr.fn = t == DType::i32 ? &unary_loop<NegI, int32_t, int32_t> : float_unary<NegE>(t);
      break;
    case Op::Abs:
      instr.fn = t == DType::i32 ? &unary_loop<AbsI, int32_t, int32_t> : float_unary<AbsE>(t);
      break;
    case Op::Relu: instr.fn = numeric_loop<ReluL>(t); break;
    case Op::Sign: instr.fn = numeric_loop<SignL>(t); break;
    case Op::Exp: instr.fn = float_unary<ExpE>(t); break;
    case Op::Log: instr.fn = float_unary<LogE>(t); break;
    case Op::Log1p: instr.fn = float_unary<Log1pE>(t); break;
    case Op::Sqrt: instr.fn = float_unary<SqrtE>(t); break;
    case Op::Rsqrt: instr.fn = float_unary<RsqrtE>(t); break;
    case Op::Tanh: instr.fn = float_unary<TanhE>(t); break;
    case Op::Sin: instr.fn = float_unary<SinE>(t); break;
    case Op::Cos: instr.fn = float_unary<CosE>(t); break;
    case Op::Erf: instr.fn = float_unary<ErfE>(t); break;
    case Op::Gelu: instr.fn = float_unary<GeluE>(t); break;
    case Op::GeluGrad: instr.fn = float_unary<GeluGradE>(t); break;
    case Op::StopGradient: instr.fn = &copy_kernel; break;  // the identity; no gradient flows
    case Op::Sigmoid: instr.fn = float_unary<SigmoidE>(t); break;
    case Op::LogicalNot:
      if (t == DType::boolean) instr.fn = &unary_loop<NotL, uint8_t, uint8_t>;
      break;
    default: break;
  }
  return true;
}

}  // namespace fjit::kernels::ew
