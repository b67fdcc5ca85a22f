// The gather of convolution products that read their image (core/kernels/gemm/patches_gemm.h):
// - the gathered blocks and slivers hold exactly the values of patches written out by a plain
//   loop (every geometry: channels 1 to 40, strides, dilation, uneven padding, a nonzero
//   padding value);
// - packed_sgemm_patches gives the bits of packed_sgemm over those patches, forward (patches .
//   B) and transposed (patches^T . B), B plain or transposed, on 1-3 threads and both kernels.
// The compiler's use of them: patches_products_test.cc.
#include "core/kernels/gemm/patches_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/base/isa.h"
#include "core/kernels/gemm/packed_gemm.h"
#include "tests/patches_test_util.h"

namespace fjit {
namespace {

using namespace patches_testing;

const Case kCases[] = {
    {2, 9, 7, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0.f},      // grey first layer, SAME
    {3, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0.f},   // K = 288: two depth blocks
    {2, 8, 9, 5, 2, 3, 2, 1, 1, 2, 0, 1, 2, 0, -1.5f},    // strides, dilation, uneven pads
    {1, 11, 6, 40, 3, 2, 2, 2, 2, 1, 2, 2, 1, 1, 0.25f},  // runs longer than a sliver
    {5, 4, 4, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0.f},      // 1x1: the image itself
    {2, 7, 7, 8, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3, 0.f},      // a window as large as the image
};

std::string name(const Case& k) {
  return "image " + std::to_string(k.n) + "x" + std::to_string(k.h) + "x" + std::to_string(k.w) +
         "x" + std::to_string(k.c) + " window " + std::to_string(k.kh) + "x" + std::to_string(k.kw);
}

TEST(PatchesGemm, BlocksAndSliversHoldThePatches) {
  for (const Case& k : kCases) {
    const std::vector<float> x = random_values(k.n * k.h * k.w * k.c, 7);
    const PatchesOperand o = operand(k, x);
    const std::vector<float> want = patches_by_loops(o);
    const int64_t rows = o.pixels(), taps = o.taps();
    // A block from an odd corner, and slivers 12 wide of an odd range of taps.
    const int64_t r0 = rows / 3, nr = rows - r0 - 1, c0 = taps / 4, nc = taps - c0;
    std::vector<float> got(nr * nc);
    o.block(r0, nr, c0, nc, got.data(), nc);
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t q = 0; q < nc; ++q)
        ASSERT_EQ(got[r * nc + q], want[(r0 + r) * taps + c0 + q])
            << name(k) << " block " << r << "," << q;
    const int64_t w = 12, slivers = (nc + w - 1) / w;
    std::vector<float> packed(slivers * nr * w, -7.f);
    o.slivers(r0, nr, c0, nc, packed.data(), w);
    for (int64_t s = 0; s < slivers; ++s)
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t q = 0; q < w; ++q) {
          const int64_t col = s * w + q;
          const float expect = col < nc ? want[(r0 + r) * taps + c0 + col] : 0.f;
          ASSERT_EQ(packed[(s * nr + r) * w + q], expect) << name(k) << " sliver " << s;
        }
  }
}

TEST(PatchesGemm, ProductsHaveThePackedGemmsBitsOverThePatches) {
  std::vector<Isa> isas{Isa::avx2};
  if (detected_isa() == Isa::avx512) isas.push_back(Isa::avx512);
  for (const Case& k : kCases) {
    const std::vector<float> x = random_values(k.n * k.h * k.w * k.c, 11);
    const PatchesOperand o = operand(k, x);
    const std::vector<float> cols = patches_by_loops(o);
    const int64_t pixels = o.pixels(), taps = o.taps();
    for (const int64_t n : {int64_t{7}, int64_t{64}})
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          const int64_t m = ta ? taps : pixels, depth = ta ? pixels : taps;
          const std::vector<float> b = random_values(depth * n, 13);
          for (const Isa isa : isas) {
            std::vector<float> want(m * n);
            packed_sgemm(isa, ta, tb, m, n, depth, cols.data(), b.data(), want.data(), false, 1);
            for (const int threads : {1, 2, 3}) {
              std::vector<float> got(m * n, NAN);
              packed_sgemm_patches(isa, ta, tb, m, n, depth, o, b.data(), got.data(), threads);
              expect_same_bits(got, want,
                               name(k) + (ta ? " patches^T" : " patches") + (tb ? " B^T" : " B") +
                                   " n " + std::to_string(n) + " threads " +
                                   std::to_string(threads) +
                                   (isa == Isa::avx2 ? " avx2" : " avx512"));
            }
          }
        }
  }
}

}  // namespace
}  // namespace fjit
