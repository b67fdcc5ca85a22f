// The update both fused update kernels end with (gemm_update.cc, reduce_update.cc):
// out = addend + alpha * x, each element rounded once, fma(alpha, x, addend).
//
// The addend is absent, of the output's shape, a row vector [N] broadcast over the rows, or a
// scalar (AddendForm). Kernels store the form in one Instr::p slot.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/kernels/kernel.h"

namespace fjit {

enum AddendForm : int64_t { kNoAddend = 0, kSameShape = 1, kRowVector = 2, kScalarAddend = 3 };

// The form of an addend of type `addend` (null: none) added to a value of shape `out`;
// false when it broadcasts in none of these ways.
inline bool addend_form(const Shape& out, const ValueType* addend, int64_t* form) {
  *form = kNoAddend;
  if (addend == nullptr) return true;
  const int64_t n = out.empty() ? 1 : out.back();
  if (addend->shape == out) *form = kSameShape;
  else if (addend->size() == 1) *form = kScalarAddend;
  else if (addend->size() == n && !addend->shape.empty() && addend->shape.back() == n) *form = kRowVector;
  else return false;
  return true;
}

namespace detail {
// out[i] = fma(alpha, x[i], kVector ? d[i] : *d) for i < len.
template <class T, bool kClear, bool kVector>
void affine_run(T alpha, std::conditional_t<kClear, T*, const T*> __restrict x, const T* d, T* out,
                int64_t len) {
  const T c = *d;
  for (int64_t i = 0; i < len; ++i) {
    out[i] = std::fma(alpha, x[i], kVector ? d[i] : c);
    if constexpr (kClear) x[i] = T(0);
  }
}
}  // namespace detail

// out[i] = fma(alpha, x[i], addend at flat position lo + i) for i < len, with rows of n
// elements (kRowVector). `addend` points at the whole addend (unused for kNoAddend). out may
// be the addend itself (an update in place), never x. With kClear, x[i] is set to zero as it
// is read (a scratch block kept zeroed between uses).
template <class T, bool kClear = false>
void affine_update(T alpha, std::conditional_t<kClear, T*, const T*> x, const T* addend,
                   int64_t form, int64_t n, int64_t lo, T* out, int64_t len) {
  const T zero = 0;
  switch (form) {
    case kNoAddend: detail::affine_run<T, kClear, false>(alpha, x, &zero, out, len); break;
    case kSameShape: detail::affine_run<T, kClear, true>(alpha, x, addend + lo, out, len); break;
    case kScalarAddend: detail::affine_run<T, kClear, false>(alpha, x, addend, out, len); break;
    case kRowVector:
      for (int64_t i = 0, j = lo % n; i < len; j = 0) {
        const int64_t count = std::min(n - j, len - i);
        detail::affine_run<T, kClear, true>(alpha, x + i, addend + j, out + i, count);
        i += count;
      }
      break;
  }
}

}  // namespace fjit
