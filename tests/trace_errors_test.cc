// Each trace-time error class names the op, the operand types and the user's file:line.
#include <gtest/gtest.h>

#include <functional>

#include "fjit.h"

namespace fjit {
namespace {

// Traces `fn` on x f32[2,3] and y f32[3]; returns the TraceError message.
std::string trace_error(const std::function<Tensor(const Tensor&, const Tensor&)>& fn) {
  auto f = jit([&](const Tensor& x, const Tensor& y) { return fn(x, y); });
  try {
    f(Array(DType::f32, {2, 3}), Array(DType::f32, {3}));
  } catch (const TraceError& e) {
    return e.what();
  }
  return "<no error>";
}

void expect_has(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
}

TEST(TraceErrors, BroadcastMismatchNamesOpShapesAndLine) {
  const int line = __LINE__ + 1;
  std::string m = trace_error([](const Tensor& x, const Tensor&) { return add(x, full(DType::f32, {4}, 1)); });
  expect_has(m, {"fjit: add(f32[2,3], f32[4])", "cannot be broadcast",
                 ("trace_errors_test.cc:" + std::to_string(line)).c_str()});
}

TEST(TraceErrors, OperatorErrorsFindTheCallSiteOnTheStack) {
  std::string m = trace_error([](const Tensor& x, const Tensor&) { return x * full(DType::f32, {5}, 1); });
  expect_has(m, {"fjit: mul(f32[2,3], f32[5])", "trace_errors_test.cc:"});
}

TEST(TraceErrors, DtypeMismatch) {
  std::string m = trace_error([](const Tensor& x, const Tensor&) { return sub(x, full(DType::f64, {2, 3}, 1)); });
  expect_has(m, {"sub(f32[2,3], f64[2,3])", "dtype mismatch"});
}

TEST(TraceErrors, MatmulContractionMismatch) {
  std::string m = trace_error([](const Tensor& x, const Tensor&) { return matmul(x, x); });
  expect_has(m, {"matmul(f32[2,3], f32[2,3])", "contraction dimensions differ (3 vs 2)"});
}

TEST(TraceErrors, MatmulRankTooLow) {
  std::string m = trace_error([](const Tensor& x, const Tensor& y) { return matmul(x, y); });
  expect_has(m, {"matmul(f32[2,3], f32[3])", "rank >= 2"});
}

TEST(TraceErrors, BadAxis) {
  std::string m = trace_error([](const Tensor& x, const Tensor&) { return sum(x, {2}); });
  expect_has(m, {"sum(f32[2,3])", "axis 2 is out of range for rank 2"});
}

TEST(TraceErrors, BadReshape) {
  std::string m = trace_error([](const Tensor& x, const Tensor&) { return reshape(x, {4, 2}); });
  expect_has(m, {"reshape(f32[2,3])", "cannot reshape", "[4,2]"});
}

TEST(TraceErrors, BadSlice) {
  std::string m = trace_error([](const Tensor& x, const Tensor&) { return slice(x, {0, 1}, {2, 5}); });
  expect_has(m, {"slice(f32[2,3])", "out of range for dimension 1"});
}

TEST(TraceErrors, FloatIndicesForTake) {
  std::string m = trace_error([](const Tensor& x, const Tensor& y) { return take(x, y, 1); });
  expect_has(m, {"take(f32[2,3], f32[3])", "i32 indices"});
}

TEST(TraceErrors, WrongRankForConcat) {
  std::string m = trace_error([](const Tensor& x, const Tensor& y) { return concat({x, y}, 0); });
  expect_has(m, {"concat(f32[2,3], f32[3])", "rank mismatch"});
}

TEST(TraceErrors, LogOfInteger) {
  std::string m = trace_error([](const Tensor& x, const Tensor&) { return log(cast(x, DType::i32)); });
  expect_has(m, {"log(i32[2,3])", "floating-point"});
}

TEST(TraceErrors, OpOutsideATrace) {
  try {
    full(DType::f32, {2}, 1.0);
    FAIL();
  } catch (const TraceError& e) {
    expect_has(e.what(), {"full", "outside a traced function", "trace_errors_test.cc:"});
  }
}

TEST(TraceErrors, SoftmaxCrossEntropyLabelShape) {
  std::string m = trace_error([](const Tensor& x, const Tensor&) {
    return softmax_cross_entropy(x, full(DType::i32, {3}, 0));
  });
  expect_has(m, {"softmax_cross_entropy(f32[2,3], i32[3])", "labels must have shape [2]"});
}

TEST(TraceErrors, WrongNumberOfDictEntriesIsAnErrorNotACrash) {
  auto f = jit([](const Params& p) { return p["w"] * 2.0; });
  ArrayDict p{{"v", Array(DType::f32, {2})}};
  EXPECT_THROW(f(p), std::out_of_range);
  ArrayDict good{{"w", Array(DType::f32, {2})}};
  EXPECT_EQ(f(good).size(), 2);
}

}  // namespace
}  // namespace fjit

namespace fjit {
namespace {

// A composite op (built from others) is named in errors as the user called it, with the
// inner op that failed given after.
TEST(TraceErrors, CompositeOpsNameTheOpTheUserCalled) {
  const int line = __LINE__ + 1;
  std::string m = trace_error([](const Tensor& x, const Tensor&) { return log_softmax(x, 5); });
  expect_has(m, {"fjit: log_softmax(f32[2,3]): axis 5 is out of range for rank 2 (in its max)",
                 ("trace_errors_test.cc:" + std::to_string(line)).c_str()});
  m = trace_error([](const Tensor& x, const Tensor&) { return softmax(x, -3); });
  expect_has(m, {"fjit: softmax(f32[2,3]): axis -3 is out of range for rank 2 (in its max)"});
  m = trace_error([](const Tensor& x, const Tensor&) {
    return gather(x, full(DType::i32, {2}, 0), 4);
  });
  expect_has(m, {"fjit: gather(f32[2,3], i32[2]): axis 4 is out of range for rank 2 (in its take)"});
  // The op called directly is named as itself, with no "in its".
  m = trace_error([](const Tensor& x, const Tensor&) { return max(x, {7}); });
  EXPECT_EQ(m.find("in its"), std::string::npos) << m;
  // After a composite has failed, later errors are not attributed to it.
  m = trace_error([](const Tensor& x, const Tensor& y) { return add(x, concat({y, y}, 0)); });
  expect_has(m, {"fjit: add(f32[2,3], f32[6])"});
}

}  // namespace
}  // namespace fjit
