// The storage dtypes (u8, u32, f16, bf16): host arrays, casts inside a step, layout and
// indexing ops that move them unchanged, checkpoints that keep their bits, and arithmetic on
// them refused with an error naming the op.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "core/ir/convert.h"
#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

TEST(DTypes, NamesSizesAndHostConversions) {
  const std::pair<DType, int> sizes[] = {{DType::u8, 1}, {DType::u32, 4}, {DType::f16, 2},
                                         {DType::bf16, 2}};
  for (auto [t, size] : sizes) {
    EXPECT_EQ(dtype_size(t), size);
    DType back;
    ASSERT_TRUE(dtype_from_name(dtype_name(t), &back));
    EXPECT_EQ(back, t);
    EXPECT_TRUE(is_storage_only(t));
    EXPECT_FALSE(is_arithmetic(t));
  }
  // Array::full converts by cast's rules: saturating for floats into integers, rounding to
  // nearest even into the half types.
  EXPECT_EQ(Array::full(DType::u8, {1}, 300.0).at_as_double(0), 255.0);
  EXPECT_EQ(Array::full(DType::u32, {1}, -5.0).at_as_double(0), 0.0);
  EXPECT_EQ(Array::full(DType::f16, {1}, 0.1).at_as_double(0), 0.0999755859375);  // nearest f16
  EXPECT_EQ(Array::full(DType::bf16, {1}, 0.1).at_as_double(0), 0.10009765625);   // nearest bf16
  EXPECT_EQ(Array::full(DType::bf16, {1}, 1e39).at_as_double(0), INFINITY);  // beyond f32 too
}

TEST(DTypes, BytesGoInAsU8AndAreCastInsideTheStep) {
  Array pixels(DType::u8, {2, 3});
  const uint8_t raw[] = {0, 1, 127, 128, 254, 255};
  std::memcpy(pixels.raw(), raw, sizeof raw);
  auto f = jit([](const Tensor& x) { return cast(x, DType::f32) * (1.0 / 255.0); });
  const std::vector<float> y = f(pixels).to_vector<float>();
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y[i], raw[i] / 255.0f);
}

TEST(DTypes, LayoutAndIndexingMoveStorageDTypesUnchanged) {
  for (DType t : {DType::u8, DType::u32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    Array x(t, {3, 4});
    for (int64_t i = 0; i < x.size(); ++i) set_element_from_double(t, x.raw(), i, double(i % 7));
    auto f = jit([](const Tensor& x) {
      Tensor r = reshape(transpose(x), {12});
      Tensor s = slice(x, {1, 0}, {3, 4}, {1, 2});
      Tensor g = take(x, constant(Array::from_vector<int32_t>({2, 0})), 0);
      Tensor c = concat({reshape(s, {4}), reshape(g, {8})}, 0);
      Tensor w = where(lt(iota(DType::i32, {12}), scalar(DType::i32, 6.0)), r, reshape(x, {12}));
      return std::tuple{r, c, w};
    });
    auto [r, c, w] = f(x);
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(r.at_as_double(i), x.at_as_double((i % 3) * 4 + i / 3));
      EXPECT_EQ(w.at_as_double(i), i < 6 ? r.at_as_double(i) : x.at_as_double(i));
    }
    const double want[] = {4, 6, 8, 10, 8, 9, 10, 11, 0, 1, 2, 3};
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(c.at_as_double(i), std::fmod(want[i], 7)) << i;
  }
}

TEST(DTypes, HalfParametersComputeInF32) {
  // Weights stored in bf16 (half the memory), cast to f32 for the product, gradient taken
  // with respect to the f32 master copy.
  auto f = jit([](const Tensor& w, const Tensor& x) {
    Tensor w16 = cast(w, DType::bf16);
    auto loss = [&](const Tensor& v) { return sum(matmul(x, cast(v, DType::f32))); };
    return std::tuple{w16, grad(loss)(w)};
  });
  const Array w = testing::random_f32({4, 3}, 1), x = testing::random_f32({2, 4}, 2);
  auto [w16, g] = f(w, x);
  EXPECT_EQ(w16.dtype(), DType::bf16);
  for (int64_t i = 0; i < w.size(); ++i)
    EXPECT_NEAR(w16.at_as_double(i), w.at_as_double(i), std::abs(w.at_as_double(i)) * 0x1p-8);
  for (int64_t k = 0; k < 4; ++k)  // d/dw[k][j] sum(x @ w) = sum over rows of x[:, k]
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_FLOAT_EQ(g.at_as_double(k * 3 + j), x.at_as_double(k) + x.at_as_double(4 + k));
}

TEST(DTypes, HalfMatmulAndReductionsAccumulateInF32) {
  // Products and sums of ones: exact in f32; a half-precision accumulator would stall
  // (f16 counts no further than 2048 by ones, bf16 no further than 256).
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    auto f = jit([t](const Tensor& a, const Tensor& b) {
      Tensor ah = cast(a, t), bh = cast(b, t);
      return std::tuple{cast(matmul(ah, bh), DType::f32), cast(sum(ah), DType::f32),
                        cast(mean(ah, {1}), DType::f32), cast(max(ah), DType::f32)};
    });
    Array a = Array::full(DType::f32, {2, 1024}, 1.0), b = Array::full(DType::f32, {1024, 3}, 1.0);
    auto [p, s, m, x] = f(a, b);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(p.at_as_double(i), 1024.0);
    EXPECT_EQ(s.item<double>(), 2048.0);
    EXPECT_EQ(m.at_as_double(0), 1.0);
    EXPECT_EQ(x.item<double>(), 1.0);
    // A sum that a half accumulator gets wrong: 4096 ones in f16 stall at 2048.
    auto g = jit([t](const Tensor& a) { return cast(sum(cast(a, t)), DType::f32); });
    EXPECT_EQ(g(Array::full(DType::f32, {4096}, 1.0)).item<double>(), 4096.0);
  }
}

TEST(DTypes, CheckpointsKeepStorageDTypesBitForBit) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("fjit-dtypes-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/mixed.safetensors";
  io::Checkpoint ck;
  for (DType t : {DType::u8, DType::u32, DType::f16, DType::bf16}) {
    Array a(t, {5});
    for (int64_t i = 0; i < 5; ++i) set_element_from_double(t, a.raw(), i, 1.5 * i - 2);
    ck.tensors.emplace_back(dtype_name(t), a);
  }
  io::save_checkpoint(path, ck);
  const io::Checkpoint back = io::load_checkpoint(path);
  ASSERT_EQ(back.tensors.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(back.tensors[i].first, ck.tensors[i].first);
    EXPECT_TRUE(back.tensors[i].second.bit_equal(ck.tensors[i].second)) << ck.tensors[i].first;
  }
  std::filesystem::remove_all(dir);
}

TEST(DTypes, ArithmeticOnStorageDTypesIsATraceErrorNamingTheOp) {
  auto f = jit([](const Tensor& x) { return x + x; });
  const std::string msg = testing::error_of<TraceError>([&] { f(Array(DType::u8, {3})); });
  EXPECT_NE(msg.find("add"), std::string::npos) << msg;
  EXPECT_NE(msg.find("u8[3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dtypes_test.cc"), std::string::npos) << msg;
  auto g = jit([](const Tensor& x) { return sum(x); });
  const std::string red = testing::error_of<TraceError>([&] { g(Array(DType::u8, {3})); });
  EXPECT_NE(red.find("sum"), std::string::npos) << red;
}

}  // namespace
}  // namespace fjit
