// recompute_in_backward (core/autodiff/recompute.h): the VJP rules that read a marked value read
// its replay instead. With a faithful replay (w + w for the value w * 2) the gradient is the
// unmarked one bit for bit; with an unfaithful one (w * 3) the gradient shows the backward
// pass read the replay, not the forward value; misuse is a TraceError. The memory it saves is
// measured on ZeRO stage 3's plan (tests/zero3_plan_test.cc).
#include <gtest/gtest.h>

#include <cmath>

#include "core/autodiff/autodiff.h"
#include "core/autodiff/recompute.h"
#include "core/runtime/jit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

// The gradient in x of sum((x @ (2 w))^2), 2 w marked with `replay` (or unmarked: null).
Array grad_x(Tensor (*replay)(const Tensor&)) {
  const Array w = testing::random_f64({3, 4}, 1), x = testing::random_f64({5, 3}, 2);
  auto f = jit([replay](const Tensor& w, const Tensor& x) {
    return grad([&](const Tensor& x) {
      Tensor w2 = w * 2.0;
      if (replay) w2 = recompute_in_backward(w2, [replay, w] { return replay(w); });
      return sum(square(matmul(x, w2)));
    })(x);
  });
  return f(w, x);
}

TEST(RecomputeInBackward, TheBackwardPassReadsTheReplay) {
  const Array plain = grad_x(nullptr);
  EXPECT_TRUE(plain.bit_equal(grad_x([](const Tensor& w) { return w + w; })));
  // dx = 2 (x W) W^T: the forward W = 2 w, the backward's W = 3 w, so 1.5 times the plain one.
  const Array odd = grad_x([](const Tensor& w) { return w * 3.0; });
  for (int64_t i = 0; i < plain.size(); ++i)
    EXPECT_NEAR(odd.data<double>()[i], 1.5 * plain.data<double>()[i], 1e-12 * (1 + std::abs(plain.data<double>()[i])));
}

TEST(RecomputeInBackward, MisuseIsATraceError) {
  EXPECT_THROW(recompute_in_backward(Tensor(), [] { return Tensor(); }), TraceError);
  auto f = jit([](const Tensor& x) { return recompute_in_backward(x, nullptr); });
  EXPECT_THROW(f(Array::scalar(1.0)), TraceError);
}

}  // namespace
}  // namespace fjit
