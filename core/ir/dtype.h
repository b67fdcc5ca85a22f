// Element types and shapes: the static part of every value fjit traces.
//
// A Shape is a list of non-negative extents, row-major. A rank-0 shape is a scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fjit {

// The arithmetic dtypes are f32, f64 and i32: every numeric op computes in them. bool is the
// result of comparisons. u8, u32, f16 and bf16 are storage dtypes: they are parameters,
// constants, random bits (u32) and checkpoint tensors, they move through layout, indexing,
// select and all_gather unchanged, and `cast` converts them to and from the arithmetic ones
// (image bytes go in as u8 and are cast inside the step; half-precision values are cast to
// f32 to compute and back to store).
enum class DType : uint8_t { f32, f64, i32, boolean, u8, u32, f16, bf16 };
inline constexpr int kNumDTypes = 8;

// Bytes per element. Booleans are stored as one byte each (0 or 1).
int dtype_size(DType t);
const char* dtype_name(DType t);
// f32 and f64: the dtypes that carry gradients and that float ops accept.
inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }
inline bool is_integer(DType t) { return t == DType::i32; }
// f32, f64, i32: what arithmetic, comparisons, matmul and reductions accept.
inline bool is_arithmetic(DType t) { return is_floating(t) || t == DType::i32; }
// u8, u32, f16, bf16 (see above).
inline bool is_storage_only(DType t) {
  return t == DType::u8 || t == DType::u32 || t == DType::f16 || t == DType::bf16;
}

// The C++ element types of the dtypes that have none of their own here (uint8_t is bool's
// storage; the half types have no arithmetic in C++20). Kernels convert them through float
// (core/kernels/elementwise/elementwise_scalar.h); users fill them with raw bytes or Array::full.
struct u8_t { uint8_t v; };
struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };

// Calls f(T{}) with T the element type stored for dtype t: float, double, int32_t, uint8_t
// (bool), u8_t, uint32_t, f16_t, bf16_t.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i32: return f(int32_t{});
    case DType::boolean: return f(uint8_t{});
    case DType::u8: return f(u8_t{});
    case DType::u32: return f(uint32_t{});
    case DType::f16: return f(f16_t{});
    case DType::bf16: return f(bf16_t{});
  }
  return f(float{});
}

// The dtype named "f32", "u8", "bf16", ... (dtype_name's inverse); false when none is.
bool dtype_from_name(const std::string& name, DType* out);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of<u8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<uint32_t> { static constexpr DType value = DType::u32; };
template <> struct dtype_of<f16_t> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<bf16_t> { static constexpr DType value = DType::bf16; };

using Shape = std::vector<int64_t>;

int64_t num_elements(const Shape& s);
// "[128,784]"; a scalar prints as "[]".
std::string shape_str(const Shape& s);
// "f32[128,784]"
std::string type_str(DType t, const Shape& s);

// Row-major strides in elements.
std::vector<int64_t> row_major_strides(const Shape& s);

// The static type of a value: what tracing knows of it before anything runs.
struct ValueType {
  DType dtype;
  Shape shape;
  int64_t size() const { return num_elements(shape); }
};

}  // namespace fjit
