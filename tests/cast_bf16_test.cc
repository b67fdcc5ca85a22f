// The f32 -> bf16 cast kernel (core/kernels/elementwise/cast_bf16.h) on both of its paths: the
// AVX512_BF16 one (VCVTNEPS2BF16, with denormal and NaN vectors taking the scalar rule) where the
// CPU has it, and the portable loop under FJIT_ISA=avx2's limit. Oracle: the reference kernel of
// the cast (reference_eval, core/ir/convert.h's convert_element), element by element; every bit
// must agree, on edge values, every class of random bit pattern, and lengths around the vector
// width and the threads' pieces.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/base/isa.h"
#include "core/base/threads.h"
#include "tests/fusion_test_util.h"

namespace fjit {
namespace {

using namespace fusion_testing;

// Bit patterns: ties to even either way, the largest finite value (rounds to infinity), NaNs
// with payloads, infinities, zeros, the smallest and largest denormals, and values that round
// up into the next binade.
constexpr uint32_t kEdges[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x7f7f8000u,
                               0x7fc00001u, 0xffa00000u, 0x7f800001u, 0x7f800000u, 0xff800000u,
                               0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x007f8000u,
                               0x00008000u, 0x00018000u, 0x3effffffu, 0xc0ff8000u, 0x00800000u};

Array bit_patterns(int64_t n, std::mt19937& rng, bool with_specials) {
  Array x(DType::f32, {n});
  auto* u = static_cast<uint32_t*>(x.raw());
  std::uniform_int_distribution<uint32_t> any;
  std::uniform_int_distribution<int> exponent(1, 254);
  for (int64_t i = 0; i < n; ++i) {
    // Mostly normal numbers, so most vectors take the instruction; with_specials mixes in
    // every class of pattern.
    const uint32_t r = any(rng);
    u[i] = (r & 0x807fffffu) | (static_cast<uint32_t>(exponent(rng)) << 23);
    if (with_specials && i % 37 == 5) u[i] = r;                 // anything, NaNs included
    if (with_specials && i % 53 == 11) u[i] = r & 0x807fffffu;  // denormals
  }
  if (with_specials)
    for (size_t k = 0; k < std::size(kEdges); ++k) u[(k * 131) % n] = kEdges[k];
  return x;
}

void expect_bits_of_reference(Isa isa, int64_t n, bool with_specials) {
  std::mt19937 rng(static_cast<uint32_t>(n * 2 + with_specials));
  TraceContext ctx({});
  Tensor x = ctx.parameter(DType::f32, {n}, "x");
  ctx.graph.outputs = {cast(x, DType::bf16).id()};
  set_isa_limit(isa);
  const Compiled c = compile_both(ctx.graph);
  const std::vector<Array> ins = {bit_patterns(n, rng, with_specials)};
  const Array want = reference(ctx.graph, ins)[0];
  for (int threads : {1, 2, 3}) {
    set_intra_op_threads(threads);
    const Array got = run(*c.plain, ins)[0];
    const auto* g = static_cast<const uint16_t*>(got.raw());
    const auto* w = static_cast<const uint16_t*>(want.raw());
    const auto* in = static_cast<const uint32_t*>(ins[0].raw());
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i)
      if (g[i] != w[i] && wrong++ < 5)
        ADD_FAILURE() << isa_name(isa) << " n=" << n << " threads=" << threads << ": element " << i
                      << " 0x" << std::hex << in[i] << " gave 0x" << g[i] << ", want 0x" << w[i];
    EXPECT_EQ(wrong, 0) << isa_name(isa) << " n=" << n << " threads=" << threads;
  }
  set_intra_op_threads(1);
}

TEST(CastBf16, BothPathsGiveTheReferenceBitsForEveryPattern) {
  std::vector<Isa> isas = {Isa::avx2};
  if (cpu_has_avx512_bf16()) isas.push_back(Isa::avx512);
  for (Isa isa : isas)
    for (int64_t n : {1, 15, 16, 17, 33, 1000, 4099, 300001})
      for (bool specials : {false, true}) expect_bits_of_reference(isa, n, specials);
  set_isa_limit(Isa::avx512);
}

}  // namespace
}  // namespace fjit
