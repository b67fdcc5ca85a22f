// Fast kernels for ops with bool results or bool operands: comparisons, logical_and/or and
// select, with NumPy broadcasting. Rows are plain loops: Eigen does not vectorize a float
// comparison into a byte result, while g++ turns these loops into masked AVX-512 code.
// Bool operands count any nonzero byte as true; bool results are always 0 or 1.
#include "core/kernels/elementwise/elementwise_common.h"

namespace fjit::kernels::ew {
namespace {

// Comparison operand value: bools compare as 0/1 whatever byte they hold.
template <class T> inline auto cmp_value(T x) {
  if constexpr (std::is_same_v<T, uint8_t>) return static_cast<uint8_t>(x != 0);
  else return x;
}

struct EqOp { template <class T> static bool apply(T a, T b) { return a == b; } };
struct NeOp { template <class T> static bool apply(T a, T b) { return a != b; } };
struct LtOp { template <class T> static bool apply(T a, T b) { return a < b; } };
struct LeOp { template <class T> static bool apply(T a, T b) { return a <= b; } };
struct GtOp { template <class T> static bool apply(T a, T b) { return a > b; } };
struct GeOp { template <class T> static bool apply(T a, T b) { return a >= b; } };
struct AndOp { static bool apply(uint8_t a, uint8_t b) { return (a != 0) & (b != 0); } };
struct OrOp { static bool apply(uint8_t a, uint8_t b) { return (a != 0) | (b != 0); } };

template <class F, class T, int S0, int S1>
void compare_kernel(const Instr& in, const Frame& f) {
  const T* a = in.in<T>(f, 0);
  const T* b = in.in<T>(f, 1);
  uint8_t* o = in.output<uint8_t>(f);
  for_each_row<2>(in, [=](int64_t oo, const std::array<int64_t, 2>& off, int64_t n) {
    const auto x = loop_operand<S0>(a + off[0]);
    const auto y = loop_operand<S1>(b + off[1]);
    uint8_t* out = o + oo;
    for (int64_t i = 0; i < n; ++i) out[i] = F::apply(cmp_value(x(i)), cmp_value(y(i)));
  });
}

template <class F, class T>
KernelFn compare_for_mask(int mask) {
  switch (mask) {
    case 3: return &compare_kernel<F, T, 1, 1>;
    case 1: return &compare_kernel<F, T, 1, 0>;
    case 2: return &compare_kernel<F, T, 0, 1>;
  }
  return nullptr;
}

template <class F>
KernelFn compare_for(DType t, int mask) {
  switch (t) {
    case DType::f32: return compare_for_mask<F, float>(mask);
    case DType::f64: return compare_for_mask<F, double>(mask);
    case DType::i32: return compare_for_mask<F, int32_t>(mask);
    case DType::boolean: return compare_for_mask<F, uint8_t>(mask);
    default: return nullptr;
  }
  return nullptr;
}

// out = cond ? a : b. Both branches are loaded unconditionally so the loop if-converts.
template <class T, int SC, int SA, int SB>
void select_op_kernel(const Instr& in, const Frame& f) {
  const uint8_t* c = in.in<uint8_t>(f, 0);
  const T* a = in.in<T>(f, 1);
  const T* b = in.in<T>(f, 2);
  T* o = in.output<T>(f);
  for_each_row<3>(in, [=](int64_t oo, const std::array<int64_t, 3>& off, int64_t n) {
    const auto cv = loop_operand<SC>(c + off[0]);
    const auto av = loop_operand<SA>(a + off[1]);
    const auto bv = loop_operand<SB>(b + off[2]);
    T* out = o + oo;
    for (int64_t i = 0; i < n; ++i) {
      const T x = av(i), y = bv(i);
      out[i] = cv(i) != 0 ? x : y;
    }
  });
}

template <class T>
KernelFn select_for_mask(int mask) {
  switch (mask) {
    case 7: return &select_op_kernel<T, 1, 1, 1>;
    case 6: return &select_op_kernel<T, 0, 1, 1>;
    case 5: return &select_op_kernel<T, 1, 0, 1>;
    case 4: return &select_op_kernel<T, 0, 0, 1>;
    case 3: return &select_op_kernel<T, 1, 1, 0>;
    case 2: return &select_op_kernel<T, 0, 1, 0>;
    case 1: return &select_op_kernel<T, 1, 0, 0>;
  }
  return nullptr;
}

KernelFn select_for(DType t, int mask) {
  switch (t) {
    case DType::f32: return select_for_mask<float>(mask);
    case DType::f64: return select_for_mask<double>(mask);
    case DType::i32: return select_for_mask<int32_t>(mask);
    case DType::boolean: case DType::u8: return select_for_mask<uint8_t>(mask);
    case DType::u32: return select_for_mask<uint32_t>(mask);
    case DType::f16: case DType::bf16: return select_for_mask<uint16_t>(mask);  // bits
  }
  return nullptr;
}

}  // namespace

bool select_compare(Instr& instr) {
  const OpKind kind = op_kind(instr.op);
  if (kind != OpKind::kCompare && kind != OpKind::kSelect &&
      instr.op != Op::LogicalAnd && instr.op != Op::LogicalOr)
    return false;
  instr.fn = nullptr;
  const auto& ins = instr.ins;
  if (kind == OpKind::kSelect) {
    if (ins.size() != 3 || ins[0].dtype != DType::boolean || ins[1].dtype != instr.out.dtype ||
        ins[2].dtype != instr.out.dtype)
      return true;
    instr.fn = select_for(instr.out.dtype, plan_broadcast(instr));
    return true;
  }
  if (ins.size() != 2 || ins[0].dtype != ins[1].dtype || instr.out.dtype != DType::boolean)
    return true;
  const DType t = ins[0].dtype;
  const int mask = plan_broadcast(instr);
  switch (instr.op) {
    case Op::Eq: instr.fn = compare_for<EqOp>(t, mask); break;
    case Op::Ne: instr.fn = compare_for<NeOp>(t, mask); break;
    case Op::Lt: instr.fn = compare_for<LtOp>(t, mask); break;
    case Op::Le: instr.fn = compare_for<LeOp>(t, mask); break;
    case Op::Gt: instr.fn = compare_for<GtOp>(t, mask); break;
    case Op::Ge: instr.fn = compare_for<GeOp>(t, mask); break;
    case Op::LogicalAnd:
      if (t == DType::boolean) instr.fn = compare_for_mask<AndOp, uint8_t>(mask);
      break;
    case Op::LogicalOr:
      if (t == DType::boolean) instr.fn = compare_for_mask<OrOp, uint8_t>(mask);
      break;
    default: break;
  }
  return true;
}

}  // namespace fjit::kernels::ew
