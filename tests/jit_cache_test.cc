// Compile-cache semantics: hits do not retrace, misses record their cause, repeated
// recompiles warn once naming the changing argument, and bad calls fail cleanly.
#include <gtest/gtest.h>

#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

Array iota_f32(Shape s) {
  Array a(DType::f32, s);
  for (int64_t i = 0; i < a.size(); ++i) a.data<float>()[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return a;
}

TEST(JitCache, SecondCallWithSameSignatureDoesNotRetrace) {
  int traced = 0;
  auto f = jit([&](const Tensor& x, const Tensor& y) {
    ++traced;
    return relu(x * y + 1.0);
  });
  Array x = iota_f32({4, 3}), y = iota_f32({4, 3});
  Array r1 = f(x, y);
  Array r2 = f(x, y);
  EXPECT_EQ(traced, 1);
  EXPECT_EQ(f.core().trace_count(), 1);
  EXPECT_TRUE(r1.bit_equal(r2));
  for (int64_t i = 0; i < x.size(); ++i) {
    float v = x.data<float>()[i] * y.data<float>()[i] + 1.0f;
    EXPECT_EQ(r1.data<float>()[i], v > 0 ? v : 0.0f);
  }
}

TEST(JitCache, NewShapeRetracesAndRecordsTheCause) {
  auto f = jit([](const Tensor& x) { return sum(x, {1}); }, {.name = "rowsum"});
  f(iota_f32({128, 784}));
  f(iota_f32({96, 784}));
  f(iota_f32({128, 784}));  // cached from the first call
  EXPECT_EQ(f.core().trace_count(), 2);
  auto causes = f.core().recompile_causes();
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0], "arg 'arg0' f32[128,784] -> f32[96,784]");
}

TEST(JitCache, DictArgumentNamesAppearInTheCause) {
  auto f = jit([](const Params& p) { return sum(p["w"]) + sum(p["b"]); });
  ArrayDict p{{"w", iota_f32({3, 2})}, {"b", iota_f32({2})}};
  f(p);
  p.set("b", iota_f32({5}));
  f(p);
  ASSERT_EQ(f.core().recompile_causes().size(), 1u);
  EXPECT_EQ(f.core().recompile_causes()[0], "arg 'arg0.b' f32[2] -> f32[5]");
}

TEST(JitCache, RepeatedRecompilesWarnOnceNamingTheArgument) {
  testing::LogCapture logs;
  JitOptions o;
  o.name = "churn";
  o.recompile_warn_threshold = 3;
  auto f = jit([](const Tensor& x, const Tensor& batch) { return sum(x) + sum(batch); }, o);
  Array x = iota_f32({2});
  for (int n = 1; n <= 6; ++n) f(x, iota_f32({n, 4}));
  EXPECT_EQ(f.core().trace_count(), 6);
  const std::string text = logs.text();
  EXPECT_NE(text.find("'churn' has been compiled 4 times; argument 'arg1' changed shape"), std::string::npos) << text;
  // Warned once only.
  EXPECT_EQ(text.find("has been compiled", text.find("has been compiled") + 1), std::string::npos);
}

TEST(JitCache, WrongDtypeAtCallIsAClearTraceError) {
  auto f = jit([](const Tensor& x, const Tensor& y) { return x + y; });
  Array xi = Array::from_vector(std::vector<int32_t>{1, 2, 3});
  Array yf = iota_f32({3});
  try {
    f(xi, yf);
    FAIL() << "expected TraceError";
  } catch (const TraceError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("i32[3]"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[3]"), std::string::npos) << m;
  }
  // The function still works with good arguments afterwards (no state lost).
  Array r = f(yf, yf);
  EXPECT_EQ(r.data<float>()[1], 2 * yf.data<float>()[1]);
}

TEST(JitCache, TupleAndDictOutputs) {
  auto f = jit([](const Params& p, const Tensor& x) {
    TensorDict out;
    out.set("w", p["w"] * 2.0);
    out.set("b", p["b"] - 1.0);
    return std::tuple{out, sum(x)};
  });
  ArrayDict p{{"w", iota_f32({2, 2})}, {"b", iota_f32({2})}};
  auto [q, s] = f(p, iota_f32({4}));
  EXPECT_EQ(q.names(), (std::vector<std::string>{"w", "b"}));
  EXPECT_EQ(q["w"].data<float>()[3], 2 * p["w"].data<float>()[3]);
  EXPECT_EQ(q["b"].data<float>()[0], p["b"].data<float>()[0] - 1);
  EXPECT_FLOAT_EQ(s.item<float>(), -3.0f - 2.5f - 2.0f - 1.5f);
}

TEST(JitCache, OutputThatIsAnInputIsCopiedNotAliased) {
  auto f = jit([](const Tensor& x) { return std::tuple{x, x + 1.0}; });
  Array x = iota_f32({3});
  auto [a, b] = f(x);
  EXPECT_TRUE(a.bit_equal(x));
  EXPECT_FALSE(a.shares_storage_with(x));
}

TEST(JitCache, CapturedLargeConstantWarnsWithTheCaptureSite) {
  testing::LogCapture logs;
  Array big = Array::full(DType::f32, {512, 1024}, 0.5);  // 2 MiB > 1 MiB default
  auto f = jit([&](const Tensor& x) { return matmul(x, Tensor(big)); });
  Array r = f(Array::full(DType::f32, {2, 512}, 1.0));
  EXPECT_FLOAT_EQ(r.data<float>()[0], 256.0f);
  EXPECT_TRUE(logs.contains("captured a large constant f32[512,1024]")) << logs.text();
  EXPECT_TRUE(logs.contains("jit_cache_test.cc:")) << logs.text();
}

TEST(JitCache, LeakedTensorFromAnotherTraceIsRejected) {
  Tensor leaked;
  auto f = jit([&](const Tensor& x) { leaked = x * 2.0; return leaked; });
  f(iota_f32({2}));
  auto g = jit([&](const Tensor& x) { return x + leaked; });
  try {
    g(iota_f32({2}));
    FAIL() << "expected TraceError";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("another trace"), std::string::npos) << e.what();
  }
}

TEST(JitCache, RunIntoReusesOutputStorage) {
  auto f = jit([](const Tensor& x) { return x * 3.0; });
  Array x = iota_f32({8}), out = Array(DType::f32, {8});
  const void* storage = out.raw();
  f.run_into(out, x);
  EXPECT_EQ(out.raw(), storage);
  EXPECT_EQ(out.data<float>()[2], x.data<float>()[2] * 3.0f);
}

}  // namespace
}  // namespace fjit
