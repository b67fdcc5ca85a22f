// remat (core/trace/remat.h): the gradient through remat equals the gradient without it, its
// captured parameters get gradients, and the compiled plan keeps fewer bytes alive: a chain of
// blocks under remat plans a clearly smaller arena than the same chain without.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;
using testing::random_f64;

constexpr int kBlocks = 12;
constexpr int64_t kBatch = 64, kWidth = 256, kHidden = 1024;

std::string w1(int i) { return "block" + std::to_string(i) + "/w1"; }
std::string w2(int i) { return "block" + std::to_string(i) + "/w2"; }

// x [batch, width] -> tanh(tanh(x w1) w2): a hidden activation four times wider than x, which
// the backward pass needs (tanh's derivative, w2's gradient).
Tensor block(const Params& p, int i, const Tensor& x) {
  return tanh(matmul(tanh(matmul(x, p[w1(i)])), p[w2(i)]));
}

Tensor chain_loss(const Params& p, const Tensor& x, bool with_remat) {
  Tensor h = x;
  for (int i = 0; i < kBlocks; ++i) {
    if (with_remat) h = remat([&p, i](const Tensor& h) { return block(p, i, h); })(h);  // captures p
    else h = block(p, i, h);
  }
  return mean(square(h));
}

ArrayDict chain_params() {
  ArrayDict p;
  for (int i = 0; i < kBlocks; ++i) {
    Array a = random_f64({kWidth, kHidden}, 10 + i), b = random_f64({kHidden, kWidth}, 100 + i);
    for (int64_t k = 0; k < a.size(); ++k) a.data<double>()[k] *= 2.0 / std::sqrt(double(kWidth));
    for (int64_t k = 0; k < b.size(); ++k) b.data<double>()[k] *= 2.0 / std::sqrt(double(kHidden));
    p.set(w1(i), a);
    p.set(w2(i), b);
  }
  return p;
}

struct Result {
  double loss;
  ArrayDict grads;
  size_t arena, min_live;
  int remat_instrs;
};

Result run_chain(bool with_remat, const ArrayDict& p, const Array& x) {
  auto step = jit([with_remat](const Params& p, const Tensor& x) {
    return value_and_grad([with_remat](const Params& p, const Tensor& x) { return chain_loss(p, x, with_remat); })(p, x);
  });
  auto [loss, grads] = step(p, x);
  const Executable& exe = *step.core().last_entry()->exe;
  int remats = 0;
  for (const Instr& in : exe.instrs) remats += in.op == Op::Remat;
  return {loss.item<double>(), grads, exe.arena_bytes, exe.min_live_bytes, remats};
}

TEST(Remat, SameGradientsAndAClearlySmallerArenaOverTwelveBlocks) {
  const ArrayDict p = chain_params();
  const Array x = random_f64({kBatch, kWidth}, 7);
  const Result plain = run_chain(false, p, x), rem = run_chain(true, p, x);
  std::printf("arena bytes: %zu without remat, %zu with (peak live %zu / %zu)\n", plain.arena, rem.arena,
              plain.min_live, rem.min_live);
  EXPECT_EQ(plain.remat_instrs, 0);
  EXPECT_EQ(rem.remat_instrs, 2 * kBlocks);  // each block's forward call and its backward one
  EXPECT_EQ(rem.loss, plain.loss);
  ASSERT_EQ(rem.grads.size(), plain.grads.size());
  double worst = 0;
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    const Array &a = plain.grads.value(i), &b = rem.grads.at(plain.grads.name(i));
    ASSERT_EQ(a.shape(), b.shape());
    double scale = 0;
    for (int64_t k = 0; k < a.size(); ++k) scale = std::max(scale, std::abs(a.data<double>()[k]));
    ASSERT_GT(scale, 0) << plain.grads.name(i);
    for (int64_t k = 0; k < a.size(); ++k)
      worst = std::max(worst, std::abs(a.data<double>()[k] - b.data<double>()[k]) / scale);
  }
  std::printf("largest gradient difference, relative to the gradient's largest element: %g\n", worst);
  EXPECT_LE(worst, 1e-12);
  // Without remat every block's [64, 1024] hidden activation (512 KiB in f64) stays alive
  // until the backward pass; with it only the [64, 256] block inputs do, plus one block's
  // recomputation at a time.
  const size_t hidden = kBatch * kHidden * sizeof(double);
  EXPECT_GT(plain.arena, kBlocks * hidden);
  EXPECT_LT(rem.arena * 2, plain.arena);
  EXPECT_LT(rem.min_live * 2, plain.min_live);
}

// Arguments and results may be pytrees; a parameter passed as an argument and one captured
// both get the gradient they get without remat.
TEST(Remat, PytreeArgumentsAndResultsAndCapturedValues) {
  auto loss = [](bool with_remat) {
    return [with_remat](const Params& p, const Tensor& x) {
      auto f = [&](const TensorDict& q, const std::pair<Tensor, Tensor>& xy) {
        Tensor h = tanh(matmul(xy.first, q["w"]) + p["b"]);  // p["b"] is captured
        return std::pair{h * xy.second, sum(h)};
      };
      TensorDict q{{"w", p["w"]}};
      auto [y, s] = with_remat ? remat(f)(q, std::pair{x, x * 2.0}) : f(q, std::pair{x, x * 2.0});
      return sum(y * y) + s;
    };
  };
  ArrayDict p{{"w", random_f64({3, 3}, 1)}, {"b", random_f64({3}, 2)}};
  const Array x = random_f64({4, 3}, 3);
  auto g = [&](bool r) { return jit([&](const Params& p, const Tensor& x) { return grad(loss(r), argnums<0, 1>)(p, x); }); };
  auto [gp, gx] = g(false)(p, x);
  auto [rp, rx] = g(true)(p, x);
  for (const char* k : {"w", "b"}) {
    const Array &a = gp.at(k), &b = rp.at(k);
    for (int64_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a.data<double>()[i], b.data<double>()[i], 1e-13) << k << " " << i;
  }
  for (int64_t i = 0; i < gx.size(); ++i) EXPECT_NEAR(gx.data<double>()[i], rx.data<double>()[i], 1e-13);
}

// remat nested in remat, and remat as the body of a scan over layers (the backward scan's
// body recomputes the layer).
TEST(Remat, NestedAndInsideAScanGiveTheSameGradient) {
  auto loss = [](int mode) {
    return [mode](const Tensor& w, const Tensor& x) {
      auto layer = [&](const Tensor& h, const Tensor& wi) { return std::pair{sin(matmul(h, wi)) + h, sum(h)}; };
      auto [h, ys] = scan([&](const Tensor& h, const Tensor& wi) {
        if (mode == 0) return layer(h, wi);
        if (mode == 1) return remat(layer)(h, wi);
        return remat([&](const Tensor& h, const Tensor& wi) {
          Tensor inner = remat([](const Tensor& a, const Tensor& b) { return sin(matmul(a, b)); })(h, wi);
          return std::pair{inner + h, sum(h)};
        })(h, wi);
      }, x, w);
      return sum(h * h) + sum(ys);
    };
  };
  const Array w = random_f64({5, 3, 3}, 4), x = random_f64({2, 3}, 5);
  auto g = [&](int mode) { return jit([&](const Tensor& w, const Tensor& x) { return grad(loss(mode))(w, x); })(w, x); };
  const Array plain = g(0);
  for (int mode : {1, 2}) {
    const Array r = g(mode);
    for (int64_t i = 0; i < plain.size(); ++i)
      EXPECT_NEAR(plain.data<double>()[i], r.data<double>()[i], 1e-13) << "mode " << mode << " element " << i;
  }
}

// Under automatic checks, a bad value inside fn is reported at its line; the gradient through
// the recomputation is unaffected by the checks.
TEST(Remat, AutomaticChecksInsideTheFunction) {
  JitOptions o;
  o.checks = CheckMode::all;
  o.policy = CheckPolicy::throw_error;
  int log_line = 0;
  auto f = jit([&](const Tensor& x, const Tensor& w) {
    return grad([&](const Tensor& x) {
      return sum(remat([&](const Tensor& a) {
        log_line = __LINE__ + 1;
        return log(a) * w;
      })(x));
    })(x);
  }, o);
  const Array w = Array::from_vector<double>({2, 3}, {2});
  const Array g = f(Array::from_vector<double>({0.5, 4}, {2}), w);
  EXPECT_EQ(g.to_vector<double>(), (std::vector<double>{4, 0.75}));
  const std::string e = error_of<CheckError>([&] { f(Array::from_vector<double>({0.5, -4}, {2}), w); });
  EXPECT_NE(e.find("log of a value below 0"), std::string::npos) << e;
  EXPECT_NE(e.find("remat_test.cc:" + std::to_string(log_line)), std::string::npos) << e;
}

TEST(Remat, MisuseNamesRematAndTheCallSite) {
  int line = 0;
  auto f = jit([&](const Tensor&) {
    line = __LINE__ + 1;
    return remat([](const Tensor& a) { return a * 2.0; })(Tensor());
  });
  const std::string e = error_of<TraceError>([&] { f(Array::from_vector<double>({1, 2}, {2})); });
  EXPECT_NE(e.find("remat"), std::string::npos) << e;
  EXPECT_NE(e.find("remat_test.cc:" + std::to_string(line)), std::string::npos) << e;
}

}  // namespace
}  // namespace fjit
