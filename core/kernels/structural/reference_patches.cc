// Reference patches and patches_adjoint: one output element at a time, from its index alone
// (the fast kernels in patches.cc walk taps and copy channel runs instead).
#include "core/kernels/structural/structural.h"
#include "core/kernels/structural/structural_reference.h"

namespace fjit::kernels::st {
namespace {

// The image element (n, y, x, c) that patches element (n, oh, ow, k) reads, or false when it
// reads padding. k = (kh * KW + kw) * C + c.
bool source_of(const std::vector<int64_t>& win, const Shape& img, const std::vector<int64_t>& at,
               std::vector<int64_t>& src) {
  const int64_t c_extent = img[3];
  const int64_t k = at[3], c = k % c_extent, tap = k / c_extent;
  const int64_t kh = tap / win[1], kw = tap % win[1];
  const int64_t y = at[1] * win[2] - win[6] + kh * win[4];
  const int64_t x = at[2] * win[3] - win[8] + kw * win[5];
  src = {at[0], y, x, c};
  return y >= 0 && y < img[1] && x >= 0 && x < img[2];
}

}  // namespace

bool reference_patches(Op op, const Attrs& attrs, std::span<const Array> ins, Array& result) {
  const Array& in = ins[0];
  std::vector<int64_t> src;
  if (op == Op::Patches) {
    for (int64_t i = 0; i < result.size(); ++i) {
      const std::vector<int64_t> at = ref::unravel(i, result.shape());
      const bool inside = source_of(attrs.window, in.shape(), at, src);
      ref::set(result, i, inside ? ref::get(in, ref::ravel(src, in.shape())) : attrs.scalar);
    }
    return true;
  }
  std::vector<double> acc(result.size(), 0.0);
  for (int64_t i = 0; i < in.size(); ++i) {
    const std::vector<int64_t> at = ref::unravel(i, in.shape());
    if (source_of(attrs.window, result.shape(), at, src))
      acc[ref::ravel(src, result.shape())] += ref::get(in, i);
  }
  for (int64_t i = 0; i < result.size(); ++i) ref::set(result, i, acc[i]);
  return true;
}

}  // namespace fjit::kernels::st
