// Check modes and policies as a user sets them: from the environment (FJIT_CHECKS and
// FJIT_ON_CHECK_FAILURE, honoured by a jit that sets no option), the mode as part of the
// compile-cache key, mode off compiling exactly the plan of code without checks (a training
// step with grad, not just a toy), and the throw policy's report going to the log as well as
// into the CheckError.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/lib/initializers.h"
#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The environment is read once, on first use: set it before anything asks. This binary then
// runs with these defaults; tests that need others say so in their JitOptions.
const bool g_env_set = [] {
  setenv("FJIT_CHECKS", "all", 1);
  setenv("FJIT_ON_CHECK_FAILURE", "log", 1);
  return true;
}();

Array vec(std::vector<float> v) { return Array::from_vector(v); }

Tensor body(const Tensor& x) {
  Tensor y = exp(x) * 2.0;
  Tensor s = sum(y);
  check(s < 100.0, "s {} too large", s);
  return s;
}

TEST(ChecksModes, EnvironmentChoosesModeAndPolicyOfAJitWithoutOptions) {
  ASSERT_TRUE(g_env_set);
  testing::LogCapture logs;
  auto f = jit([](const Tensor& x) { return body(x); });  // no JitOptions: the environment decides
  EXPECT_EQ(f(vec({0, 1})).item<float>(), 2.0f + 2.0f * std::exp(1.0f));
  const Executable& exe = *f.core().last_entry()->exe;
  int automatic = 0;
  for (const CheckSite& s : exe.check_sites) automatic += s.kind != CheckKind::user;
  EXPECT_GE(automatic, 2) << "FJIT_CHECKS=all adds automatic checks";  // exp, mul (at least)
  // FJIT_ON_CHECK_FAILURE=log: the failing step reports and returns its outputs.
  Array out;
  EXPECT_NO_THROW(out = f(vec({kNaN, 1})));
  EXPECT_TRUE(std::isnan(out.item<float>()));
  EXPECT_TRUE(logs.contains("check failed")) << logs.text();
  EXPECT_TRUE(logs.contains("(policy: log)")) << logs.text();
  EXPECT_TRUE(logs.contains("NaN in exp f32[2]")) << logs.text();
}

TEST(ChecksModes, ModeIsPartOfTheCacheKey) {
  const CheckMode saved = default_check_mode();
  auto f = jit([](const Tensor& x) { return body(x); });
  const Array x = vec({1, 2});
  int sites[3] = {-1, -1, -1};
  for (int round = 0; round < 2; ++round)
    for (CheckMode m : {CheckMode::off, CheckMode::user, CheckMode::all}) {
      set_default_check_mode(m);
      f(x);
      // The plan that ran is the one for this mode, compiled on the first round only.
      const FlatArgs args{{&x}, {0}, f.core().last_entry()->structure_hash};
      const CompiledEntry* e = f.core().find(args);
      const int n = e ? e->exe->num_check_sites() : -1;
      if (round == 0)
        sites[static_cast<int>(m)] = n;
      else
        EXPECT_EQ(n, sites[static_cast<int>(m)]) << check_mode_name(m);
    }
  set_default_check_mode(saved);
  EXPECT_EQ(f.core().trace_count(), 3) << "one trace per mode; returning to a mode hits the cache";
  EXPECT_EQ(f.core().compile_count(), 3);
  EXPECT_EQ(sites[static_cast<int>(CheckMode::off)], 0);
  EXPECT_EQ(sites[static_cast<int>(CheckMode::user)], 1);
  EXPECT_GT(sites[static_cast<int>(CheckMode::all)], 1);
}

// A training step with checks on the loss and the gradient norm, and the same step written
// without them: under mode off both compile to the same plan, instruction for instruction.
auto train_step(bool with_checks) {
  JitOptions o;
  o.checks = CheckMode::off;
  return jit(
      [with_checks](const Params& p, const Tensor& x, const Tensor& y) {
        auto loss_fn = [with_checks](const Params& p, const Tensor& x, const Tensor& y) {
          Tensor h = relu(matmul(x, p["w1"]) + p["b1"]);
          Tensor loss = mean(softmax_cross_entropy(matmul(h, p["w2"]) + p["b2"], y));
          if (with_checks) check(isfinite(loss), "loss is {}", loss);
          return loss;
        };
        auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
        if (with_checks) {
          Tensor norm = global_norm(g);
          check(isfinite(norm) && norm < 1e4, "gradient norm {} not finite or too large", norm);
        }
        return std::tuple{sgd(p, g, 0.1), loss};
      },
      o);
}

TEST(ChecksModes, ModeOffCompilesTheTrainingStepOfCodeWithoutChecks) {
  ArrayDict p{{"w1", Array::full(DType::f32, {4, 8}, 0.1)},
              {"b1", Array::full(DType::f32, {8}, 0.0)},
              {"w2", Array::full(DType::f32, {8, 3}, -0.1)},
              {"b2", Array::full(DType::f32, {3}, 0.0)}};
  Array x = Array::full(DType::f32, {2, 4}, 0.5);
  Array y = Array::from_vector(std::vector<int32_t>{0, 2});
  auto with = train_step(true), without = train_step(false);
  auto [pa, la] = with(p, x, y);
  auto [pb, lb] = without(p, x, y);
  EXPECT_TRUE(la.bit_equal(lb));
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(pa.value(i).bit_equal(pb.value(i))) << pa.name(i);
  const Executable& a = *with.core().last_entry()->exe;
  const Executable& b = *without.core().last_entry()->exe;
  EXPECT_EQ(a.num_check_sites(), 0);
  EXPECT_EQ(a.instrs.size(), b.instrs.size());
  EXPECT_EQ(a.plan_string(), b.plan_string());
  EXPECT_EQ(a.arena_bytes, b.arena_bytes);
  // The global norm computed only for the check is dead code without it.
  EXPECT_EQ(a.graph->to_string(), b.graph->to_string());
}

// Issue 5: outputs are bit-identical with checks on and off. A production check on the global
// gradient norm (or mode all's automatic checks) reads every weight gradient dW, so the GEMM
// update that computes p - lr * dW must also sum dW's squares or write dW out; the update
// itself must round exactly as it does without checks (core/compile/fusion/fusion.h).
// gelu_hidden: GELU between the layers instead of ReLU (fusion recomputes its intermediates in
// the backward pass unless a check reads them: the same bits either way).
auto checked_sgd_step(CheckMode mode, bool norm_check, bool gelu_hidden = false) {
  JitOptions o;
  o.checks = mode;
  o.policy = CheckPolicy::throw_error;
  return jit(
      [norm_check, gelu_hidden](const Params& p, const Tensor& x, const Tensor& y) {
        auto loss_fn = [gelu_hidden](const Params& p, const Tensor& x, const Tensor& y) {
          const int layers = static_cast<int>(p.size() / 2);
          Tensor h = x;
          for (int k = 1; k <= layers; ++k) {
            h = matmul(h, p["w" + std::to_string(k)]) + p["b" + std::to_string(k)];
            if (k < layers) h = gelu_hidden ? gelu(h) : relu(h);
          }
          return mean(softmax_cross_entropy(h, y));
        };
        auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
        check(isfinite(loss) && loss < 1e4, "loss is {}", loss);
        if (norm_check) {
          Tensor norm = global_norm(g);
          check(isfinite(norm) && norm < 1e4, "gradient norm {} not finite or too large", norm);
        }
        return std::tuple{sgd(p, g, 0.01), loss};
      },
      o);
}

void expect_step_bit_identical_across_modes(const std::vector<int64_t>& sizes, int64_t batch,
                                            bool gelu_hidden = false) {
  const ArrayDict p = mlp_params(sizes, 1);
  const Array x = he_uniform(Shape{batch, sizes.front()}, 3);
  Array y(DType::i32, Shape{batch});
  for (int64_t i = 0; i < batch; ++i)
    y.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % sizes.back());
  struct Variant {
    const char* name;
    CheckMode mode;
    bool norm;
  };
  const Variant variants[] = {{"user: loss and global norm", CheckMode::user, true},
                              {"all", CheckMode::all, false},
                              {"all with global norm", CheckMode::all, true}};
  auto base = checked_sgd_step(CheckMode::off, false, gelu_hidden);
  // Two steps, the second from the first's parameters: a difference in the last bit of an
  // update would also show in the second loss.
  auto [p1, l1] = base(p, x, y);
  auto [p2, l2] = base(p1, x, y);
  bool gemm_epilogue = false;
  for (const Instr& in : base.core().last_entry()->exe->instrs)
    gemm_epilogue = gemm_epilogue || in.label.rfind("gemm[", 0) == 0;
  EXPECT_TRUE(gemm_epilogue) << "without checks, some SGD update should be a GEMM epilogue";
  for (const Variant& v : variants) {
    auto f = checked_sgd_step(v.mode, v.norm, gelu_hidden);
    auto [q1, m1] = f(p, x, y);
    auto [q2, m2] = f(q1, x, y);
    EXPECT_GT(f.core().last_entry()->exe->num_check_sites(), 0) << v.name;
    EXPECT_TRUE(m1.bit_equal(l1)) << v.name << ": loss " << m1.item<float>() << " vs "
                                  << l1.item<float>();
    EXPECT_TRUE(m2.bit_equal(l2)) << v.name << ": second loss " << m2.item<float>() << " vs "
                                  << l2.item<float>();
    for (size_t i = 0; i < p1.size(); ++i) {
      EXPECT_TRUE(q1.value(i).bit_equal(p1.value(i))) << v.name << ": " << p1.name(i);
      EXPECT_TRUE(q2.value(i).bit_equal(p2.value(i))) << v.name << ": second step " << p2.name(i);
    }
  }
}

TEST(ChecksModes, SgdStepIsBitIdenticalWithChecksOffUserAndAllLarge) {
  expect_step_bit_identical_across_modes({784, 512, 512, 10}, 128);
}

TEST(ChecksModes, SgdStepIsBitIdenticalWithChecksOffUserAndAllSmall) {
  expect_step_bit_identical_across_modes({64, 128, 10}, 64);
}

TEST(ChecksModes, GeluSgdStepIsBitIdenticalWithChecksOffUserAndAll) {
  expect_step_bit_identical_across_modes({100, 300, 200, 10}, 37, /*gelu_hidden=*/true);
}

// JAX checkify's enabled-errors test: one input that breaks a user check and makes a NaN;
// what raises depends only on the mode.
TEST(ChecksModes, EnabledSetDecidesWhatRaises) {
  auto make = [](CheckMode m) {
    JitOptions o;
    o.checks = m;
    o.policy = CheckPolicy::throw_error;
    return jit(
        [](const Tensor& x) {
          check(all(x > 0.0), "x must be positive");
          return sqrt(x) * 2.0;
        },
        o);
  };
  const Array bad = vec({-1, 4});
  auto off = make(CheckMode::off);
  Array out;
  EXPECT_NO_THROW(out = off(bad));
  EXPECT_TRUE(std::isnan(out.to_vector<float>()[0]));
  auto report = [&](auto& f) {
    try {
      f(bad);
    } catch (const CheckError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "no CheckError";
    return std::string();
  };
  auto user = make(CheckMode::user);
  const std::string u = report(user);
  EXPECT_NE(u.find("x must be positive"), std::string::npos) << u;
  EXPECT_NE(u.find("1 check raised"), std::string::npos) << u;
  EXPECT_EQ(u.find("sqrt of a negative"), std::string::npos) << u;
  auto all_checks = make(CheckMode::all);
  const std::string a = report(all_checks);
  EXPECT_NE(a.find("x must be positive"), std::string::npos) << a;
  EXPECT_NE(a.find("sqrt of a negative number in sqrt f32[2]"), std::string::npos) << a;
  EXPECT_NE(a.find("NaN in sqrt f32[2]"), std::string::npos) << a;
}

TEST(ChecksModes, ThrowPolicyLogsTheReportItThrows) {
  testing::LogCapture logs;
  JitOptions o;
  o.name = "logged_step";
  o.checks = CheckMode::user;
  o.policy = CheckPolicy::throw_error;
  auto f = jit([](const Tensor& x) { return body(x); }, o);
  std::string what;
  try {
    f(vec({5, 5}));
    ADD_FAILURE() << "no CheckError";
  } catch (const CheckError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("s 593.6"), std::string::npos) << what;  // 4 exp(5) = 593.65...
  EXPECT_TRUE(logs.contains("error fjit: check failed in 'logged_step' at step 0")) << logs.text();
  EXPECT_TRUE(logs.contains(what.substr(0, what.find('\n')))) << logs.text();
}

}  // namespace
}  // namespace fjit
