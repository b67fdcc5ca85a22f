#include "core/ir/dtype.h"

#include <cstdlib>

namespace fjit {

int dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::boolean: return 1;
    case DType::u8: return 1;
    case DType::u32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
  }
  std::abort();
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::boolean: return "bool";
    case DType::u8: return "u8";
    case DType::u32: return "u32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  std::abort();
}

bool dtype_from_name(const std::string& name, DType* out) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == dtype_name(static_cast<DType>(i))) {
      *out = static_cast<DType>(i);
      return true;
    }
  return false;
}

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::string type_str(DType t, const Shape& s) { return dtype_name(t) + shape_str(s); }

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

}  // namespace fjit
