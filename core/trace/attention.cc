// The fused attention builder (see core/trace/attention.h).
#include "core/trace/attention.h"

#include <algorithm>
#include <cmath>

namespace fjit {

Tensor dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                             const Tensor& key_lengths, double scale, Loc loc) {
  const char* name = "dot_product_attention";
  if (!q.defined() || !k.defined() || !v.defined())
    detail::fail(name, {}, "q, k and v must be defined Tensors", &loc);
  std::vector<Tensor> ins{q, k, v};
  if (key_lengths.defined()) ins.push_back(key_lengths);
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    detail::fail(name, ins, "expects q [B,H,Tq,dh], k [B,H,Tk,dh] and v [B,H,Tk,dv] of rank 4", &loc);
  if (!std::isfinite(scale)) detail::fail(name, ins, "the scale must be finite", &loc);
  const Shape qs = q.shape(), vs = v.shape();  // copies: building ops grows the node list
  Attrs a;
  a.index = causal ? 1 : 0;
  a.scalar = scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(qs[3], 1)));
  const Tensor packed = detail::build(name, Op::Attention, ins, std::move(a), {q.dtype() == DType::bf16 ? DType::f32 : q.dtype(), {}}, &loc);
  return slice(packed, {0, 0, 0, 0}, {qs[0], qs[1], qs[2], vs[3]}, {}, loc);
}

}  // namespace fjit
