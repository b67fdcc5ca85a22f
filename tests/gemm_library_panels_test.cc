// Products on BLIS under a step deadline (core/kernels/gemm/gemm_library.h): a long product on
// BLIS's native path runs in column panels and asks the deadline before each. Oracle: the
// same product without a deadline (whole, one BLIS call), bit for bit, over odd shapes, every
// transposition, f32 and f64, and many panels; and a 3000^3 product stopped by a short
// deadline leaves panels undone. CTest also runs this on BLIS's haswell and skx kernels
// (BLIS_ARCH_TYPE, BLIS's own variable) where the CPU has them; without BLIS kernels for the
// CPU the tests skip (the library is not used).
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <string>

#include "core/base/isa.h"
#include "core/base/step_deadline.h"
#include "core/compile/kernel_sleep_testing.h"
#include "core/kernels/gemm/gemm_library.h"
#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Whether BLIS runs the products here with kernels this CPU can execute. Its AVX2 kernels are
// left out beside fjit's AVX-512 ones (gemm_library.h); this test is about BLIS, so there it
// narrows fjit's kernels to AVX2, which brings BLIS back.
bool library_usable() {
  apply_process_environment();
  if (!gemm_library_enabled() && gemm_library_has_kernels() && !gemm_library_kernels_avx512())
    set_isa_limit(Isa::avx2);
  if (!gemm_library_enabled()) return false;
  const std::string name = gemm_library_name();
  if (has(name, "skx") && !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")))
    return false;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

JitOptions options(double timeout_s) {
  JitOptions o;
  o.name = "library_panels";
  o.checks = CheckMode::user;
  o.policy = CheckPolicy::throw_error;
  o.step_timeout_s = timeout_s;
  return o;
}

Tensor product(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  return matmul(ta ? transpose(a) : a, tb ? transpose(b) : b);
}

struct Shape3 {
  int64_t m, k, n;
  bool ta, tb, f64;
};

TEST(GemmLibraryPanels, PanelsUnderAFarDeadlineComputeTheWholeProductsBits) {
  if (!library_usable()) GTEST_SKIP() << "BLIS is not used here: " << gemm_library_name();
  set_library_panels(int64_t{1} << 22, 64);  // panels of 64 to a few hundred columns
  const Shape3 shapes[] = {
      {517, 531, 777, false, false, false}, {640, 512, 1001, true, false, false},
      {601, 733, 555, false, true, false},  {523, 611, 903, true, true, false},
      {515, 529, 701, false, false, true},  {707, 541, 613, true, false, true},
      {533, 513, 839, false, true, true},   {611, 577, 545, true, true, true},
      // A dimension under BLIS's small-matrix thresholds (where its kernels have them): run
      // whole under the deadline too.
      {97, 600, 2000, false, false, false}, {600, 40, 900, true, true, true},
  };
  uint32_t seed = 1;
  for (const Shape3& s : shapes) {
    const bool ta = s.ta, tb = s.tb;
    const Shape sa = ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, sb = tb ? Shape{s.n, s.k} : Shape{s.k, s.n};
    const Array a = s.f64 ? testing::random_f64(sa, ++seed) : testing::random_f32(sa, ++seed);
    const Array b = s.f64 ? testing::random_f64(sb, ++seed) : testing::random_f32(sb, ++seed);
    auto fn = [ta, tb](const Tensor& x, const Tensor& y) { return product(x, y, ta, tb); };
    const std::string what = fmt::format("m {} k {} n {} ta {} tb {} f64 {}", s.m, s.k, s.n, ta, tb, s.f64);
    const Array whole = jit(fn, options(0.0))(a, b);
    (void)take_library_panels();
    const Array cut = jit(fn, options(600.0))(a, b);
    const LibraryPanels p = take_library_panels();
    EXPECT_TRUE(cut.bit_equal(whole)) << what;
    EXPECT_EQ(p.run, p.total) << what;  // every panel ran
    if (s.m >= 512 && s.k >= 512) {
      EXPECT_GT(p.total, 2) << what;  // on the native path: it was cut
    }
  }
  set_library_panels(0, 0);
}

// 2 * 3000^3 flops on BLIS, far longer than the deadline on any CPU: it stops with panels left
// undone and the report names the product.
TEST(GemmLibraryPanels, ALongProductStopsAtTheDeadlineWithPanelsLeft) {
  if (!library_usable()) GTEST_SKIP() << "BLIS is not used here: " << gemm_library_name();
  const int64_t n = 3000;
  auto gemm = jit([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, options(0.02));
  const Array a = Array::full(DType::f32, {n, n}, 0.5), b = Array::full(DType::f32, {n, n}, 0.25);
  (void)take_library_panels();
  const std::string what = testing::error_of<CheckError>([&] { (void)gemm(a, b); });
  EXPECT_TRUE(has(what, "the step ran past its deadline of 0.02 s in matmul f32[3000,3000] (instruction 0")) << what;
  const LibraryPanels p = take_library_panels();
  EXPECT_GT(p.total, 1);
  EXPECT_LT(p.run, p.total) << p.run << " of " << p.total;
}

// A long product with a dimension under BLIS's small-matrix thresholds (where its kernels have
// them) cannot be cut into panels with the same bits, so fjit's driver takes it, and that asks
// the deadline: started past the deadline, the product stops at its first ask (the count of
// kernel stops grows; BLIS would have run it whole). A short one stays on BLIS.
TEST(GemmLibraryPanels, ALongProductOnTheSmallMatrixPathGoesToADriverThatPolls) {
  if (!library_usable()) GTEST_SKIP() << "BLIS is not used here: " << gemm_library_name();
  set_library_panels(int64_t{1} << 24, 64);  // "long": at least 2^25 flops
  const Array a = testing::random_f32({24, 1024}, 3), b = testing::random_f32({1024, 2048}, 4);
  auto fn = [](const Tensor& x, const Tensor& y) { return matmul(x, y); };
  (void)jit(fn, options(600.0))(a, b);  // the library's first call sets up its buffers
  auto gemm = jit(fn, options(0.5));
  (void)gemm(a, b);  // compiles; the deadline is far for this product
  const int64_t stops = kernel_deadline_stops();
  testing::start_past_deadline(0, Op::MatMul);
  const std::string what = testing::error_of<CheckError>([&] { (void)gemm(a, b); });
  EXPECT_TRUE(has(what, "of 0.5 s in matmul f32[24,2048] (instruction 0")) << what;
  EXPECT_GT(kernel_deadline_stops(), stops) << what;
  set_library_panels(0, 0);
}

// Which kernels take the plain products (gemm_library.h): BLIS's AVX2 kernels are left out
// while fjit's kernels are AVX-512 ones, and the name says why; under the AVX2 limit, or where
// BLIS's kernels are AVX-512 ones, BLIS takes them.
TEST(GemmLibraryChoice, AvxTwoKernelsAreLeftOutBesideFjitsAvxFiveTwelveOnes) {
  if (!gemm_library_has_kernels()) GTEST_SKIP() << "BLIS has no kernels here: " << gemm_library_name();
  const Isa before = active_isa();
  set_gemm_library_allowed(true);
  set_isa_limit(Isa::avx512);
  const bool narrower = active_isa() == Isa::avx512 && !gemm_library_kernels_avx512();
  EXPECT_EQ(gemm_library_enabled(), !narrower) << gemm_library_name();
  EXPECT_EQ(has(gemm_library_name(), "not used beside fjit's AVX-512 ones"), narrower) << gemm_library_name();
  set_isa_limit(Isa::avx2);
  EXPECT_TRUE(gemm_library_enabled()) << gemm_library_name();
  EXPECT_FALSE(has(gemm_library_name(), "not used")) << gemm_library_name();
  set_isa_limit(before);
}

}  // namespace
}  // namespace fjit
