// Reference Philox4x32-10 and unit floats: one output element at a time, the 32x32 -> 64-bit
// products done in 16-bit limbs. Written apart from random.cc so that the two agree only if
// both follow the published algorithm (tests/random_test.cc also checks its test vectors).
#include <array>
#include <cmath>

#include "core/kernels/structural/structural.h"
#include "core/kernels/structural/structural_reference.h"

namespace fjit::kernels::st {
namespace {

// (hi, lo) words of a * b, by schoolbook multiplication in 16-bit limbs.
void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t a0 = a & 0xffff, a1 = a >> 16, b0 = b & 0xffff, b1 = b >> 16;
  const uint64_t low = a0 * b0, mid1 = a0 * b1, mid2 = a1 * b0, high = a1 * b1;
  const uint64_t mid = (low >> 16) + (mid1 & 0xffff) + (mid2 & 0xffff);
  lo = static_cast<uint32_t>((low & 0xffff) | ((mid & 0xffff) << 16));
  hi = static_cast<uint32_t>(high + (mid1 >> 16) + (mid2 >> 16) + (mid >> 16));
}

std::array<uint32_t, 4> philox_block(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 1; round <= 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(0xD2511F53u, c[0], hi0, lo0);
    mul_hi_lo(0xCD9E8D57u, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k = {k[0] + 0x9E3779B9u, k[1] + 0xBB67AE85u};
  }
  return c;
}

}  // namespace

bool reference_random(Op op, const Attrs& attrs, std::span<const Array> ins, Array& result) {
  if (op == Op::RandomUnit) {
    const uint32_t* bits = ins[0].data<uint32_t>();
    for (int64_t i = 0; i < result.size(); ++i) {
      const double u = result.dtype() == DType::f32 ? std::ldexp(double(bits[i] >> 8), -24)
                                                    : std::ldexp(double(bits[i]), -32);
      ref::set(result, i, u);
    }
    return true;
  }
  const uint32_t* key = ins[0].data<uint32_t>();
  uint32_t* out = result.data<uint32_t>();
  if (op == Op::FoldIn) {
    uint32_t data;
    std::memcpy(&data, ins[1].raw(), sizeof data);
    const auto c = philox_block({data, 0, 2, 0}, {key[0], key[1]});
    out[0] = c[0];
    out[1] = c[1];
    return true;
  }
  for (int64_t i = 0; i < result.size(); ++i) {
    const uint64_t block = static_cast<uint64_t>(i) / 4;
    const auto c = philox_block({static_cast<uint32_t>(block & 0xffffffffu),
                                 static_cast<uint32_t>(block >> 32),
                                 static_cast<uint32_t>(attrs.index), 0},
                                {key[0], key[1]});
    out[i] = c[i % 4];
  }
  return true;
}

}  // namespace fjit::kernels::st
