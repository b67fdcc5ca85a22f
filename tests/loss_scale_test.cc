// Loss scaling driven by the check flags (core/lib/loss_scale.h, parallel/train/loss_scaling.h),
// through the classifier trainer with two thread replicas on the committed fixture:
//  - a forced overflow (a scale that f16 gradients cannot hold) raises loss_scale_overflow,
//    the step is skipped with parameters and optimizer state bit-identical to before it, the
//    scale halves, and the next steps train;
//  - growth_interval good steps double the scale (oracle: the policy replayed on the host);
//  - a run with overflows and the same run resumed from a checkpoint are bit-identical;
//  - f32 gradients at scale 1 give the unscaled step's bits (multiplying by 1 is exact);
//  - f16 gradients move half the all-reduce bytes of f32 ones (metrics().allreduce_bytes);
//  - the f16 sum of the all-reduce against a host loop that rounds each partial sum;
//  - the language-model trainer: a forced overflow is skipped exactly, the scale halves and
//    is in its checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/base/metrics.h"
#include "core/ir/convert.h"
#include "lib/trainer.h"
#include "parallel/communicator_reduce.h"
#include "tests/fixture_data.h"
#include "tests/test_util.h"
#include "tests/tiny_lm.h"

namespace fjit::examples {
namespace {

using testing::expect_bit_equal;

using namespace fjit::training;
using fjit::testing::fixture;

TrainOptions small_options() {
  TrainOptions o;
  o.batch_size = 8;  // 2 batches per epoch of the 16-example fixture, 4 rows per replica
  o.epochs = 100;
  o.max_steps = 12;
  o.seed = 5;
  o.log_every = 0;
  o.lr_schedule = "constant";
  o.divergence_check_every = 1;
  return o;
}

TrainOptions scaled(const std::string& grad_dtype, const std::string& scale, int64_t interval = 2000) {
  TrainOptions o = small_options();
  o.grad_dtype = grad_dtype;
  o.loss_scale = scale;
  o.loss_scale_growth_interval = interval;
  return o;
}

bool any_differs(const ArrayDict& a, const ArrayDict& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!a.value(i).bit_equal(b.value(i))) return true;
  return false;
}

StepStats step(Trainer& t) {
  std::optional<StepStats> s = t.step();
  EXPECT_TRUE(s.has_value());
  return s.value_or(StepStats{});
}

TEST(DynamicLossScale, MovesAsThePolicySays) {
  DynamicLossScale s({.init_scale = 8, .growth_interval = 2, .min_scale = 2, .max_scale = 32});
  EXPECT_EQ(s.scale(), 8.0f);
  EXPECT_FALSE(s.update(false, false));
  EXPECT_TRUE(s.update(false, false));  // two good steps: doubles
  EXPECT_EQ(s.scale(), 16.0f);
  EXPECT_FALSE(s.update(false, true));  // skipped by another check: nothing moves
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_TRUE(s.update(true, true));
  EXPECT_EQ(s.scale(), 8.0f);
  s.update(true, true);
  s.update(true, true);
  EXPECT_EQ(s.scale(), 2.0f);  // not below min_scale
  for (int i = 0; i < 10; ++i) s.update(false, false);
  EXPECT_EQ(s.scale(), 32.0f);  // not above max_scale
  DynamicLossScale r;
  r.set_state(s.state());
  EXPECT_EQ(r.scale(), s.scale());
  EXPECT_EQ(r.good_steps(), s.good_steps());
  EXPECT_THROW(r.set_state("2 x"), std::invalid_argument);

  LossScaleOptions fixed;
  ASSERT_TRUE(parse_loss_scale("1024", &fixed));
  DynamicLossScale f(fixed);
  EXPECT_FALSE(f.update(true, true));
  EXPECT_EQ(f.scale(), 1024.0f);
  EXPECT_FALSE(parse_loss_scale("-1", &fixed));
  EXPECT_FALSE(parse_loss_scale("1e99", &fixed));
  EXPECT_THROW(DynamicLossScale({.backoff_factor = 1.5}), std::invalid_argument);
  EXPECT_TRUE(needs_loss_scale(DType::f16));
  EXPECT_FALSE(needs_loss_scale(DType::bf16));
}

TEST(LossScale, ForcedOverflowIsSkippedExactlyAndTheScaleHalves) {
  Trainer t(Mesh::threads(2), scaled("f16", "dynamic"), fixture());
  ASSERT_NE(t.loss_scale(), nullptr);
  t.loss_scale()->set_scale(256);
  EXPECT_FALSE(step(t).skipped);
  const ArrayDict params = testing::deep_copy(t.params()), state = testing::deep_copy(t.optimizer_state());
  const int64_t raised = metrics().checks_raised.load();
  // 2^100 times any gradient above 2^-84 in magnitude is beyond f16's 65504: inf.
  t.loss_scale()->set_scale(std::ldexp(1.0, 100));
  const StepStats s = step(t);
  EXPECT_TRUE(s.skipped);
  EXPECT_GT(metrics().checks_raised.load(), raised);
  EXPECT_EQ(t.loss_scale()->scale(), static_cast<float>(std::ldexp(1.0, 99)));
  expect_bit_equal(t.params(), params, "param after the skipped step");
  expect_bit_equal(t.optimizer_state(), state, "optimizer state after the skipped step");
  // The next steps train.
  t.loss_scale()->set_scale(256);
  EXPECT_FALSE(step(t).skipped);
  EXPECT_FALSE(step(t).skipped);
  EXPECT_TRUE(any_differs(t.params(), params));
}

TEST(LossScale, OverflowReportNamesTheParameter) {
  // The step alone under the throw policy: the report is the CheckError's text.
  TrainOptions o = scaled("f16", "dynamic");
  Trainer t(Mesh::threads(2), o, fixture());
  TrainStepFn fn = t.train_step().function();
  PmapOptions po;
  po.jit.policy = CheckPolicy::throw_error;
  TrainStep strict = make_train_step(Mesh::threads(2), fn, po);
  const io::Batch* b = t.next_batch();
  ASSERT_NE(b, nullptr);
  Array step_number = Array::scalar(int32_t{0});
  try {
    strict(t.params(), t.optimizer_state(), (*b)["images"], (*b)["labels"], step_number,
           Array::scalar(static_cast<float>(std::ldexp(1.0, 100))));
    ADD_FAILURE() << "no overflow was reported";
  } catch (const CheckError& e) {
    const std::string report = e.what();
    EXPECT_NE(report.find("loss scale overflow: "), std::string::npos) << report;
    EXPECT_NE(report.find("parameters have non-finite gradients at loss scale "), std::string::npos) << report;
    EXPECT_NE(report.find("the first is parameter 0 of [0: "), std::string::npos) << report;
  }
}

TEST(LossScale, GrowthIntervalGoodStepsDoubleTheScale) {
  Trainer t(Mesh::threads(2), scaled("f16", "dynamic", 3), fixture());
  t.loss_scale()->set_scale(64);
  DynamicLossScale oracle({.init_scale = 64, .growth_interval = 3});
  for (int k = 0; k < 7; ++k) {
    const StepStats s = step(t);
    ASSERT_FALSE(s.skipped) << "step " << k;
    oracle.update(false, false);
    EXPECT_EQ(t.loss_scale()->scale(), oracle.scale()) << "after step " << k;
  }
  EXPECT_EQ(t.loss_scale()->scale(), 256.0f);  // doubled after steps 2 and 5
}

std::vector<int64_t> run_to_end(Trainer& t) {
  std::vector<int64_t> skipped;
  while (std::optional<StepStats> s = t.step())
    if (s->skipped) skipped.push_back(s->step);
  return skipped;
}

TEST(LossScale, ResumedRunWithOverflowsIsBitIdentical) {
  // Starting far too high with a short growth interval: the scale backs off through several
  // overflows, then grows into overflows again.
  const TrainOptions o = scaled("f16", "dynamic", 2);
  Trainer straight(Mesh::threads(2), o, fixture());
  straight.loss_scale()->set_scale(std::ldexp(1.0, 20));
  const std::vector<int64_t> skipped = run_to_end(straight);
  EXPECT_FALSE(skipped.empty());
  EXPECT_LT(skipped.size(), 10u);

  const auto path = std::filesystem::temp_directory_path() /
                    ("fjit_loss_scale_" + std::to_string(::getpid()) + ".safetensors");
  {
    TrainOptions first = o;
    first.max_steps = 5;
    Trainer t(Mesh::threads(2), first, fixture());
    t.loss_scale()->set_scale(std::ldexp(1.0, 20));
    run_to_end(t);
    t.save(path.string());
  }
  Trainer resumed(Mesh::threads(2), o, fixture());
  resumed.load(path.string());
  std::filesystem::remove(path);
  std::vector<int64_t> later = run_to_end(resumed);
  std::vector<int64_t> expected;
  for (int64_t k : skipped)
    if (k >= 5) expected.push_back(k);
  EXPECT_FALSE(expected.empty()) << "no overflow after the checkpoint: the test covers less";
  EXPECT_EQ(later, expected);
  EXPECT_EQ(resumed.loss_scale()->state(), straight.loss_scale()->state());
  expect_bit_equal(resumed.params(), straight.params(), "param");
  expect_bit_equal(resumed.optimizer_state(), straight.optimizer_state(), "optimizer state");
}

TEST(LossScale, F32GradientsAtScaleOneAreTheUnscaledStep) {
  TrainOptions plain = small_options();
  plain.max_steps = 4;
  TrainOptions one = scaled("f32", "1");
  one.max_steps = 4;
  Trainer a(Mesh::threads(2), plain, fixture());
  Trainer b(Mesh::threads(2), one, fixture());
  for (int k = 0; k < 4; ++k) {
    const StepStats sa = step(a), sb = step(b);
    EXPECT_FALSE(sb.skipped);
    EXPECT_EQ(sa.loss, sb.loss) << "step " << k;
  }
  expect_bit_equal(a.params(), b.params(), "param");
  expect_bit_equal(a.optimizer_state(), b.optimizer_state(), "optimizer state");
}

int64_t allreduce_bytes_of_one_step(const TrainOptions& o) {
  Trainer t(Mesh::threads(2), o, fixture());
  step(t);  // compiles
  const int64_t before = metrics().allreduce_bytes.load();
  EXPECT_FALSE(step(t).skipped);
  return metrics().allreduce_bytes.load() - before;
}

TEST(LossScale, F16GradientsHalveTheAllReduceBytes) {
  TrainOptions o32 = scaled("f32", "256"), o16 = scaled("f16", "256");
  o32.divergence_check_every = o16.divergence_check_every = 0;
  int64_t params = 0;
  {
    Trainer t(Mesh::threads(2), o32, fixture());
    for (const auto& [name, a] : t.params()) params += a.size();
  }
  const int64_t b32 = allreduce_bytes_of_one_step(o32), b16 = allreduce_bytes_of_one_step(o16);
  // The gradients: 4 bytes an element against 2; the rest (loss, accuracy, the check flags)
  // is the same in both.
  EXPECT_EQ(b32 - b16, 2 * params);
  EXPECT_EQ(b16 - 2 * params, b32 - 4 * params);
  EXPECT_GT(b32 - 4 * params, 0);
}

TEST(LossScale, F16SumRoundsEachPartialSum) {
  const float a[] = {1.0f, 60000.0f, 0.5f, 2049.0f, -3.0f};
  const float b[] = {0.00048828125f, 10000.0f, 0.25f, 1.0f, 3.0f};
  const float c[] = {0.00048828125f, 1.0f, 0.125f, 1.0f, -0.0f};
  constexpr int64_t n = 5;
  std::vector<f16_t> x(n), y(n), z(n), out(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = convert_element<f16_t>(a[i]);
    y[i] = convert_element<f16_t>(b[i]);
    z[i] = convert_element<f16_t>(c[i]);
  }
  const void* ins[] = {x.data(), y.data(), z.data()};
  void* outs[] = {out.data()};
  combine_in_rank_order(ins, 3, outs, 1, 0, n, DType::f16, ReduceOp::sum);
  for (int64_t i = 0; i < n; ++i) {
    // Oracle: in double, rounded to f16 after each addition.
    double s = widen(x[i]);
    s = widen(convert_element<f16_t>(s + widen(y[i])));
    s = widen(convert_element<f16_t>(s + widen(z[i])));
    EXPECT_EQ(widen(out[i]), s) << "element " << i;
  }
  EXPECT_TRUE(std::isinf(widen(out[1])));           // 70000 is beyond f16
  EXPECT_EQ(widen(out[0]), 1.0f);                   // 1 + 2^-11 rounds to even, twice
  EXPECT_EQ(widen(out[3]), 2048.0f);                // 2049 is 2048 in f16; +1 ties to even twice
}

ParsedOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

TEST(LossScale, OptionsAndTheirRefusals) {
  ParsedOptions p = parse({"--grad-dtype", "f16", "--loss-scale", "dynamic", "--loss-scale-growth-interval", "7"});
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.options.grad_dtype, "f16");
  EXPECT_EQ(p.options.loss_scale_growth_interval, 7);
  EXPECT_TRUE(loss_scaling_on(p.options));
  EXPECT_EQ(parse({"--loss-scale", "1024"}).error, "");
  EXPECT_NE(parse({"--grad-dtype", "bf16"}).error, "");
  EXPECT_NE(parse({"--loss-scale", "0"}).error, "");
  EXPECT_NE(parse({"--loss-scale", "1e39"}).error, "");
  EXPECT_NE(parse({"--loss-scale", "inf"}).error, "");
  EXPECT_FALSE(loss_scaling_on(parse({}).options));
  // A loss-scaled run needs checks on and the skip_step policy.
  TrainOptions o = scaled("f16", "dynamic");
  o.on_check_failure = CheckPolicy::throw_error;
  EXPECT_NE(fjit::testing::error_of<std::invalid_argument>([&] { Trainer t(Mesh::threads(2), o, fixture()); })
                .find("skip_step"), std::string::npos);
  o.on_check_failure.reset();
  o.checks = CheckMode::off;
  EXPECT_NE(fjit::testing::error_of<std::invalid_argument>([&] { Trainer t(Mesh::threads(2), o, fixture()); })
                .find("checks"), std::string::npos);
}

// In a plan: psum of an f16 scalar over three replicas (replica r holds 20000 * (r + 1)) is
// 20000 + 40000 = 60000, then + 60000: inf in f16; pmax of f16 is refused at trace time.
TEST(LossScale, F16AllReduceIsASumOnly) {
  Mesh mesh = Mesh::threads(3);
  auto f = pmap(mesh, "r", [](const Tensor& x) {
    Tensor v = (cast(axis_index("r"), DType::f32) + 1.0) * 20000.0 + sum(x);
    return std::tuple{cast(psum(cast(v, DType::f16), "r"), DType::f32),
                      cast(psum(cast(v * 0.25, DType::f16), "r"), DType::f32)};
  });
  auto [big, small] = f(Array::full(DType::f32, {3, 1}, 0.0));
  EXPECT_TRUE(std::isinf(big.item<float>()));
  EXPECT_EQ(small.item<float>(), 30000.0f);
  auto g = pmap(mesh, "r", [](const Tensor& x) { return pmax(cast(x, DType::f16), "r"); });
  EXPECT_THROW(g(Array::full(DType::f32, {3, 1}, 0.0)), TraceError);
}

TEST(LossScale, LanguageModelTrainerSkipsAForcedOverflowExactly) {
  const auto dir = std::filesystem::temp_directory_path() / ("fjit_loss_scale_lm_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  lm::LmOptions o = testing::tiny_lm_options(dir, 4);
  o.grad_dtype = "f16";  // dynamic loss scale by default
  lm::LmTrainer t(Mesh::threads(2), o);
  ASSERT_NE(t.loss_scale(), nullptr);
  t.loss_scale()->set_scale(64);
  ASSERT_TRUE(t.step().has_value());
  const ArrayDict params = testing::deep_copy(t.trainable_params()), state = testing::deep_copy(t.optimizer_state());
  t.loss_scale()->set_scale(std::ldexp(1.0, 100));
  std::optional<StepStats> s = t.step();
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->skipped);
  EXPECT_EQ(t.loss_scale()->scale(), static_cast<float>(std::ldexp(1.0, 99)));
  expect_bit_equal(t.trainable_params(), params, "param after the skipped step");
  expect_bit_equal(t.optimizer_state(), state, "optimizer state after the skipped step");
  t.loss_scale()->set_scale(64);
  s = t.step();
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(s->skipped);
  EXPECT_TRUE(any_differs(t.trainable_params(), params));
  // The scale goes into checkpoints and comes back.
  const std::string path = (dir / "ckpt" / "here.safetensors").string();
  t.save(path);
  lm::LmTrainer u(Mesh::threads(2), o);
  u.load(path);
  EXPECT_EQ(u.loss_scale()->state(), t.loss_scale()->state());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fjit::examples
