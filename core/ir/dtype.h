// Element types and shapes: the static part of every value fjit traces.
//
// A Shape is a list of non-negative extents, row-major. A rank-0 shape is a scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fjit {

enum class DType : uint8_t { f32, f64, i32, boolean };
inline constexpr int kNumDTypes = 4;

// Bytes per element. Booleans are stored as one byte each (0 or 1).
int dtype_size(DType t);
const char* dtype_name(DType t);
inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }
inline bool is_integer(DType t) { return t == DType::i32; }

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::boolean; };

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
