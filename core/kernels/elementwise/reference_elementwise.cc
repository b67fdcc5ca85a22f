// Reference kernels for the elementwise family: the oracle for the fast kernels in tests and
// the evaluator for constant folding. Deliberately plain: one loop over output elements,
// each output index unravelled and mapped to every operand by NumPy broadcasting, each value
// computed in the op's dtype with std:: functions. Shares nothing with the fast kernels but
// the conversion and i32 pow rules in elementwise_scalar.h.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "core/kernels/elementwise/elementwise_scalar.h"
#include "core/kernels/families.h"

namespace fjit::kernels {
namespace {

// Calls f(T{}) with T the storage type of t (bool is stored as uint8_t).
template <class F>
void with_type(DType t, F&& f) {
  visit_dtype(t, f);
}

void unravel(int64_t flat, const Shape& shape, std::vector<int64_t>& idx) {
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
}

// Flat element of an operand of shape `in` that output index `idx` reads (right-aligned;
// extent-1 and missing dims broadcast).
int64_t operand_index(const Shape& in, const std::vector<int64_t>& idx) {
  const size_t lead = idx.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : idx[lead + d]);
  return flat;
}

// Calls f(out_flat, operand_flats) for every output element.
template <class F>
void for_each_element(const Shape& out, std::span<const Array> ins, F&& f) {
  std::vector<int64_t> idx(out.size()), at(ins.size());
  const int64_t n = num_elements(out);
  for (int64_t i = 0; i < n; ++i) {
    unravel(i, out, idx);
    for (size_t k = 0; k < ins.size(); ++k) at[k] = operand_index(ins[k].shape(), idx);
    f(i, at);
  }
}

template <class T>
T unary_value(Op op, T x) {
  if (op == Op::StopGradient) return x;
  if constexpr (std::is_same_v<T, int32_t>) {
    switch (op) {
      case Op::Neg: return static_cast<int32_t>(-static_cast<int64_t>(x));
      case Op::Abs: return static_cast<int32_t>(std::abs(static_cast<int64_t>(x)));
      case Op::Relu: return x > 0 ? x : 0;
      case Op::Sign: return x > 0 ? 1 : x < 0 ? -1 : 0;
      default: break;
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Op::Neg: return -x;
      case Op::Abs: return std::abs(x);
      case Op::Exp: return std::exp(x);
      case Op::Log: return std::log(x);
      case Op::Log1p: return std::log1p(x);
      case Op::Sqrt: return std::sqrt(x);
      case Op::Rsqrt: return T(1) / std::sqrt(x);
      case Op::Tanh: return std::tanh(x);
      case Op::Sin: return std::sin(x);
      case Op::Cos: return std::cos(x);
      case Op::Erf: return std::erf(x);
      case Op::Gelu: return x * T(0.5) * (std::erf(x * T(M_SQRT1_2)) + T(1));
      case Op::GeluGrad:
        return (std::erf(x * T(M_SQRT1_2)) + T(1)) * T(0.5) +
               x * std::exp(-x * x * T(0.5)) * T(0.3989422804014327);
      case Op::Sigmoid:
        return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
      case Op::Relu: return std::isnan(x) ? x : x > 0 ? x : T(0);
      case Op::Sign: return std::isnan(x) ? x : x > 0 ? T(1) : x < 0 ? T(-1) : T(0);
      default: break;
    }
  }
  throw std::logic_error(std::string("reference: ") + op_name(op) + " has no rule for this dtype");
}

template <class T>
T binary_value(Op op, T a, T b) {
  if constexpr (std::is_same_v<T, int32_t>) {
    const int64_t x = a, y = b;  // exact in int64; narrowing back wraps (C++20)
    switch (op) {
      case Op::Add: return static_cast<int32_t>(x + y);
      case Op::Sub: return static_cast<int32_t>(x - y);
      case Op::Mul: return static_cast<int32_t>(x * y);
      case Op::Div: return y == 0 ? 0 : static_cast<int32_t>(x / y);
      case Op::Pow: return pow_i32(a, b);
      case Op::Maximum: return std::max(a, b);
      case Op::Minimum: return std::min(a, b);
      default: break;
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    const bool nan = std::isnan(a) || std::isnan(b);
    switch (op) {
      case Op::Add: return a + b;
      case Op::Sub: return a - b;
      case Op::Mul: return a * b;
      case Op::Div: return a / b;
      case Op::Pow: return std::pow(a, b);
      case Op::Maximum: return nan ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
      case Op::Minimum: return nan ? std::numeric_limits<T>::quiet_NaN() : std::min(a, b);
      default: break;
    }
  }
  throw std::logic_error(std::string("reference: ") + op_name(op) + " has no rule for this dtype");
}

template <class T>
bool compare_value(Op op, T a, T b) {
  switch (op) {
    case Op::Eq: return a == b;
    case Op::Ne: return a != b;
    case Op::Lt: return a < b;
    case Op::Le: return a <= b;
    case Op::Gt: return a > b;
    case Op::Ge: return a >= b;
    default: throw std::logic_error("reference: not a comparison");
  }
}

void reference_source(Op op, const Attrs& attrs, Array& result) {
  if (op == Op::Constant && attrs.value && attrs.value->size() != result.size())
    throw std::logic_error("reference: constant data does not match its type");
  if (op == Op::Iota && result.rank() > 0 && (attrs.axis < 0 || attrs.axis >= result.rank()))
    throw std::logic_error("reference: iota axis out of range");
  with_type(result.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = result.data<T>();
    if (op == Op::Constant && attrs.value) {
      const T* src = attrs.value->data<T>();
      for (int64_t i = 0; i < result.size(); ++i) o[i] = src[i];
    } else if (op == Op::Constant) {
      for (int64_t i = 0; i < result.size(); ++i) o[i] = convert_element<T>(attrs.scalar);
    } else {  // iota
      std::vector<int64_t> idx(result.shape().size());
      for (int64_t i = 0; i < result.size(); ++i) {
        unravel(i, result.shape(), idx);
        o[i] = convert_element<T>(idx.empty() ? int64_t{0} : idx[attrs.axis]);
      }
    }
  });
}

void reference_unary(Op op, const Array& x, Array& result) {
  const int64_t n = result.size();
  with_type(x.dtype(), [&](auto in_tag) {
    using T = decltype(in_tag);
    const T* src = x.data<T>();
    if (op == Op::Cast) {
      with_type(result.dtype(), [&](auto out_tag) {
        using U = decltype(out_tag);
        for (int64_t i = 0; i < n; ++i) result.data<U>()[i] = convert_element<U>(src[i]);
      });
    } else if constexpr (kStorageOnlyElement<T>) {
      throw std::logic_error(std::string("reference: ") + op_name(op) + " on " +
                             dtype_name(x.dtype()));
    } else if (op == Op::IsFinite) {
      uint8_t* o = result.data<uint8_t>();
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_floating_point_v<T>) o[i] = std::isfinite(src[i]);
        else o[i] = 1;
      }
    } else if (op == Op::LogicalNot) {
      for (int64_t i = 0; i < n; ++i) result.data<uint8_t>()[i] = !src[i];
    } else {
      for (int64_t i = 0; i < n; ++i) result.data<T>()[i] = unary_value<T>(op, src[i]);
    }
  });
}

// Storage-only element types have no arithmetic (the shape rules admit none).
template <class T>
void reference_binary(Op op, const ValueType& out, std::span<const Array> ins, Array& result) {
  if constexpr (kStorageOnlyElement<T>) {
    throw std::logic_error("reference: arithmetic on a storage dtype");
  } else {
    const T *a = ins[0].data<T>(), *b = ins[1].data<T>();
    T* o = result.data<T>();
    for_each_element(out.shape, ins, [&](int64_t i, const std::vector<int64_t>& at) {
      o[i] = binary_value<T>(op, a[at[0]], b[at[1]]);
    });
  }
}

template <class T>
void reference_compare(Op op, const ValueType& out, std::span<const Array> ins, Array& result) {
  if constexpr (kStorageOnlyElement<T>) {
    throw std::logic_error("reference: comparison of a storage dtype");
  } else {
    const T *a = ins[0].data<T>(), *b = ins[1].data<T>();
    uint8_t* o = result.data<uint8_t>();
    for_each_element(out.shape, ins, [&](int64_t i, const std::vector<int64_t>& at) {
      // bools compare as true/false, whatever nonzero byte they hold
      using V = std::conditional_t<std::is_same_v<T, uint8_t>, bool, T>;
      o[i] = compare_value<V>(op, a[at[0]], b[at[1]]);
    });
  }
}

}  // namespace

bool reference_elementwise(Op op, const Attrs& attrs, const ValueType& out,
                           std::span<const Array> ins, Array& result) {
  if (op_kernel_family(op) != KernelFamily::kElementwiseFamily) return false;
  if (static_cast<int>(ins.size()) != op_arity(op))
    throw std::logic_error(std::string("reference: ") + op_name(op) + " given " +
                           std::to_string(ins.size()) + " operands");
  switch (op_kind(op)) {
    case OpKind::kSource:
      reference_source(op, attrs, result);
      return true;
    case OpKind::kUnary:
      reference_unary(op, ins[0], result);
      return true;
    case OpKind::kBinary:
      with_type(out.dtype, [&](auto tag) { reference_binary<decltype(tag)>(op, out, ins, result); });
      return true;
    case OpKind::kCompare:
      with_type(ins[0].dtype(), [&](auto tag) { reference_compare<decltype(tag)>(op, out, ins, result); });
      return true;
    case OpKind::kLogical: {
      if (op == Op::LogicalNot) {
        reference_unary(op, ins[0], result);
        return true;
      }
      const uint8_t *a = ins[0].data<uint8_t>(), *b = ins[1].data<uint8_t>();
      uint8_t* o = result.data<uint8_t>();
      for_each_element(out.shape, ins, [&](int64_t i, const std::vector<int64_t>& at) {
        const bool x = a[at[0]] != 0, y = b[at[1]] != 0;
        o[i] = op == Op::LogicalAnd ? (x && y) : (x || y);
      });
      return true;
    }
    case OpKind::kSelect:
      with_type(out.dtype, [&](auto tag) {
        using T = decltype(tag);
        const uint8_t* c = ins[0].data<uint8_t>();
        const T *a = ins[1].data<T>(), *b = ins[2].data<T>();
        T* o = result.data<T>();
        for_each_element(out.shape, ins, [&](int64_t i, const std::vector<int64_t>& at) {
          o[i] = c[at[0]] != 0 ? a[at[1]] : b[at[2]];
        });
      });
      return true;
    default:
      return false;
  }
}

}  // namespace fjit::kernels
