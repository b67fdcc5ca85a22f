// The layers' mixed-precision policy (see core/nn/precision.h).
#include "core/nn/precision.h"

#include <stdexcept>
#include <string>

#include "core/trace/attention.h"

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

Tensor policy_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                        const Tensor& key_lengths, double scale, Loc loc) {
  const bool bf16 = current.compute == DType::bf16 && q.defined() && k.defined() && v.defined() &&
                    q.dtype() == DType::f32 && k.dtype() == DType::f32 && v.dtype() == DType::f32;
  if (!bf16) return dot_product_attention(q, k, v, causal, key_lengths, scale, loc);
  return dot_product_attention(cast(q, DType::bf16, loc), cast(k, DType::bf16, loc), cast(v, DType::bf16, loc),
                               causal, key_lengths, scale, loc);
}

}  // namespace fjit
