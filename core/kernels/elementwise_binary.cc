// Fast kernels for binary arithmetic (add, sub, mul, div, pow, maximum, minimum) with NumPy
// broadcasting. Each kernel walks the broadcast plan (elementwise_common.h) row by row; a row
// is one Eigen expression for f32/f64, and a plain loop with wrapping uint32 arithmetic for
// i32 (Eigen's int packets wrap too, but its scalar tail would be signed overflow: UB).
#include <limits>

#include "core/kernels/elementwise_common.h"
#include "core/kernels/elementwise_scalar.h"

namespace fjit::kernels::ew {
namespace {

inline uint32_t u32(int32_t x) { return static_cast<uint32_t>(x); }
inline int32_t s32(uint32_t x) { return static_cast<int32_t>(x); }

// Each op: eval(A, B) on Eigen float row expressions, i32(a, b) on scalars.

struct AddOp {
  template <class A, class B> static auto eval(const A& a, const B& b) { return a + b; }
  static int32_t i32(int32_t a, int32_t b) { return s32(u32(a) + u32(b)); }
};
struct SubOp {
  template <class A, class B> static auto eval(const A& a, const B& b) { return a - b; }
  static int32_t i32(int32_t a, int32_t b) { return s32(u32(a) - u32(b)); }
};
struct MulOp {
  template <class A, class B> static auto eval(const A& a, const B& b) { return a * b; }
  static int32_t i32(int32_t a, int32_t b) { return s32(u32(a) * u32(b)); }
};
struct DivOp {
  template <class A, class B> static auto eval(const A& a, const B& b) { return a / b; }
  static int32_t i32(int32_t a, int32_t b) {
    if (b == 0) return 0;
    if (b == -1) return s32(0u - u32(a));  // INT32_MIN / -1 wraps to INT32_MIN
    return a / b;
  }
};
struct PowOp {
  template <class A, class B> static auto eval(const A& a, const B& b) { return a.pow(b); }
  static int32_t i32(int32_t a, int32_t b) { return pow_i32(a, b); }
};
struct MaximumOp {
  template <class A, class B> static auto eval(const A& a, const B& b) {
    using T = typename A::Scalar;
    return a.binaryExpr(b, Eigen::internal::scalar_max_op<T, T, Eigen::PropagateNaN>());
  }
  static int32_t i32(int32_t a, int32_t b) { return a > b ? a : b; }
};
struct MinimumOp {
  template <class A, class B> static auto eval(const A& a, const B& b) {
    using T = typename A::Scalar;
    return a.binaryExpr(b, Eigen::internal::scalar_min_op<T, T, Eigen::PropagateNaN>());
  }
  static int32_t i32(int32_t a, int32_t b) { return a < b ? a : b; }
};

// One row of n outputs; S0/S1: operand inner stride (1 contiguous, 0 broadcast scalar).
template <class F, class T, int S0, int S1>
inline void binary_row(T* o, const T* a, const T* b, int64_t n) {
  if constexpr (std::is_same_v<T, int32_t>) {
    const auto x = loop_operand<S0>(a);
    const auto y = loop_operand<S1>(b);
    for (int64_t i = 0; i < n; ++i) o[i] = F::i32(x(i), y(i));
  } else {
    OutMap<T>(o, n) = F::eval(eigen_operand<S0>(a, n), eigen_operand<S1>(b, n));
  }
}

template <class F, class T, int S0, int S1>
void binary_kernel(const Instr& in, const Frame& f) {
  const T* a = in.in<T>(f, 0);
  const T* b = in.in<T>(f, 1);
  T* o = in.output<T>(f);
  for_each_row<2>(in, [&](int64_t oo, const std::array<int64_t, 2>& off, int64_t n) {
    binary_row<F, T, S0, S1>(o + oo, a + off[0], b + off[1], n);
  });
}

template <class F, class T>
KernelFn binary_for_mask(int mask) {
  switch (mask) {
    case 3: return &binary_kernel<F, T, 1, 1>;
    case 1: return &binary_kernel<F, T, 1, 0>;
    case 2: return &binary_kernel<F, T, 0, 1>;
  }
  return nullptr;
}

template <class F>
KernelFn binary_for(DType t, int mask) {
  switch (t) {
    case DType::f32: return binary_for_mask<F, float>(mask);
    case DType::f64: return binary_for_mask<F, double>(mask);
    case DType::i32: return binary_for_mask<F, int32_t>(mask);
    case DType::boolean: return nullptr;
  }
  return nullptr;
}

}  // namespace

bool select_binary(Instr& instr) {
  if (op_kind(instr.op) != OpKind::kBinary) return false;
  instr.fn = nullptr;
  const DType t = instr.out.dtype;
  if (instr.ins.size() != 2 || instr.ins[0].dtype != t || instr.ins[1].dtype != t) return true;
  const int mask = plan_broadcast(instr);
  switch (instr.op) {
    case Op::Add: instr.fn = binary_for<AddOp>(t, mask); break;
    case Op::Sub: instr.fn = binary_for<SubOp>(t, mask); break;
    case Op::Mul: instr.fn = binary_for<MulOp>(t, mask); break;
    case Op::Div: instr.fn = binary_for<DivOp>(t, mask); break;
    case Op::Pow: instr.fn = binary_for<PowOp>(t, mask); break;
    case Op::Maximum: instr.fn = binary_for<MaximumOp>(t, mask); break;
    case Op::Minimum: instr.fn = binary_for<MinimumOp>(t, mask); break;
    default: break;
  }
  return true;
}

}  // namespace fjit::kernels::ew
