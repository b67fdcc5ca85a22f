// Reference kernels of softmax_xent and softmax_xent_grad: plain two-pass loops in double per
// row (the maximum, then the sum of exp(x - max)), written independently of the streaming fast
// kernel (softmax_xent.cc).
#include <cmath>

#include "core/kernels/structural/structural.h"
#include "core/kernels/structural/structural_reference.h"

namespace fjit::kernels::st {

bool reference_softmax_xent(Op op, std::span<const Array> ins, Array& result) {
  if (op != Op::SoftmaxXent && op != Op::SoftmaxXentGrad) return false;
  const Array& x = ins[0];
  const Array& labels = ins[1];
  const int64_t rows = labels.size(), v = x.shape().back();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t k = static_cast<int64_t>(ref::get(labels, r));
    const bool in_range = k >= 0 && k < v;
    double mx = -INFINITY;
    for (int64_t j = 0; j < v; ++j) mx = std::fmax(mx, ref::get(x, r * v + j));
    for (int64_t j = 0; j < v; ++j)
      if (std::isnan(ref::get(x, r * v + j))) mx = NAN;
    double s = 0;
    for (int64_t j = 0; j < v; ++j) s += std::exp(ref::get(x, r * v + j) - mx);
    if (op == Op::SoftmaxXent) {
      ref::set(result, r, in_range ? std::log(s) - (ref::get(x, r * v + k) - mx) : 0.0);
      continue;
    }
    const double ct = ref::get(ins[2], r);
    for (int64_t j = 0; j < v; ++j) {
      const double p = std::exp(ref::get(x, r * v + j) - mx) / s;
      ref::set(result, r * v + j, in_range ? (p - (j == k ? 1.0 : 0.0)) * ct : 0.0);
    }
  }
  return true;
}

}  // namespace fjit::kernels::st
