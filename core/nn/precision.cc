// The layers' mixed-precision policy (see core/nn/precision.h).
#include "core/nn/precision.h"

#include <stdexcept>
#include <string>

namespace fjit {
namespace {
thread_local Precision current{};
}  // namespace

Precision current_precision() { return current; }

PrecisionScope::PrecisionScope(Precision p) : saved_(current) {
  if (p.compute != DType::f32 && p.compute != DType::bf16)
    throw std::invalid_argument(std::string("PrecisionScope: compute dtype must be f32 or bf16, not ") +
                                dtype_name(p.compute));
  current = p;
}

PrecisionScope::~PrecisionScope() { current = saved_; }

bool compute_dtype_from_name(const std::string& name, DType* out) {
  if (name == "f32") *out = DType::f32;
  else if (name == "bf16") *out = DType::bf16;
  else return false;
  return true;
}

Tensor policy_matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Loc loc) {
  const bool bf16 = current.compute == DType::bf16 && a.defined() && b.defined() &&
                    a.dtype() == DType::f32 && b.dtype() == DType::f32;
  if (!bf16) return matmul(a, b, trans_a, trans_b, loc);
  return matmul(cast(a, DType::bf16, loc), cast(b, DType::bf16, loc), DType::f32, trans_a, trans_b, loc);
}

}  // namespace fjit
