// Donation (JitOptions::donate_argnums): a donated argument's buffers are updated in place
// when the plan allows it, with results bit-identical to a run without donation; unsafe plans,
// checks that must keep the previous state, and aliased arguments fall back to fresh outputs.
#include <gtest/gtest.h>

#include <limits>
#include <tuple>

#include "fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::deep_copy;

Tensor loss_fn(const Params& p, const Tensor& x, const Tensor& y) {
  Tensor h = relu(matmul(x, p["w1"]) + p["b1"]);
  Tensor logits = matmul(h, p["w2"]) + p["b2"];
  return mean(softmax_cross_entropy(logits, y));
}

ArrayDict params() {
  ArrayDict p;
  p.set("w1", he_uniform({16, 32}, 1));
  p.set("b1", Array::zeros(DType::f32, {32}));
  p.set("w2", he_uniform({32, 4}, 2));
  p.set("b2", Array::zeros(DType::f32, {4}));
  return p;
}

struct Batch {
  Array x = he_uniform({8, 16}, 3);
  Array y = Array::from_vector<int32_t>({0, 1, 2, 3, 3, 2, 1, 0});
};

auto make_step(std::vector<int> donate, CheckMode mode = CheckMode::off,
               CheckPolicy policy = CheckPolicy::throw_error) {
  return jit(
      [](const Params& p, const Tensor& x, const Tensor& y) {
        auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
        check(isfinite(loss), "loss {} is not finite", loss);
        return std::tuple{sgd(p, g, 0.1), loss};
      },
      JitOptions{.name = "step", .checks = mode, .policy = policy, .donate_argnums = donate});
}

TEST(Donation, DonatedParametersAreUpdatedInPlaceAndMatchAFreshRun) {
  Batch b;
  ArrayDict ref = params(), p = params();
  std::vector<const void*> storage;
  for (const auto& [name, a] : p) storage.push_back(a.raw());
  auto plain = make_step({});
  auto donating = make_step({0});
  for (int step = 0; step < 5; ++step) {
    std::tuple<ArrayDict, Array> a;
    plain.run_into(a, ref, b.x, b.y);
    ref = std::get<0>(a);
    std::tuple<ArrayDict, Array> out{p, Array()};  // the outputs are the donated parameters
    donating.run_into(out, p, b.x, b.y);
    size_t i = 0;
    for (const auto& [name, arr] : std::get<0>(out)) {
      EXPECT_EQ(arr.raw(), storage[i++]) << name << ": not updated in place at step " << step;
      EXPECT_TRUE(arr.bit_equal(ref[name])) << name << " differs from the run without donation";
    }
    EXPECT_TRUE(std::get<1>(out).bit_equal(std::get<1>(a)));
  }
  // p's handles share the storage that was written: they hold the new values.
  EXPECT_TRUE(p["w1"].bit_equal(ref["w1"]));
}

TEST(Donation, WithoutDonationSharedOutputsGetFreshStorage) {
  Batch b;
  ArrayDict p = params();
  const ArrayDict before = deep_copy(p);
  auto step = make_step({});
  std::tuple<ArrayDict, Array> out{p, Array()};
  step.run_into(out, p, b.x, b.y);
  EXPECT_NE(std::get<0>(out)["w1"].raw(), p["w1"].raw());
  EXPECT_TRUE(p["w1"].bit_equal(before["w1"]));  // the inputs were not touched
}

TEST(Donation, AnInputReadAfterItsReplacementIsWrittenIsNotAliased) {
  // The new "a" (a*2) is written before sum(a) reads the old one: writing in place would
  // change the sum, so the plan must refuse.
  auto f = jit(
      [](const Params& p) {
        TensorDict out;
        out.set("a", p["a"] * 2.0);
        return std::tuple{out, sum(p["a"] * p["a"])};
      },
      JitOptions{.name = "late_read", .donate_argnums = {0}});
  ArrayDict p;
  p.set("a", Array::from_vector<float>({1, 2, 3}));
  std::tuple<ArrayDict, Array> out{p, Array()};
  f.run_into(out, p);
  const auto& exe = *f.core().last_entry()->exe;
  EXPECT_FALSE(exe.can_alias(0, 0));
  EXPECT_NE(std::get<0>(out)["a"].raw(), p["a"].raw());
  EXPECT_EQ(std::get<0>(out)["a"].to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(std::get<1>(out).item<float>(), 14.0f);  // the sum of the old values
  EXPECT_EQ(p["a"].to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(Donation, SkipStepKeepsThePreviousStateIntact) {
  Batch b;
  ArrayDict p = params();
  const ArrayDict before = deep_copy(p);
  auto step = make_step({0}, CheckMode::user, CheckPolicy::skip_step);
  Array bad_x = b.x.clone();
  bad_x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  std::tuple<ArrayDict, Array> out{p, Array()};
  StepResult r = step.run_into(out, p, bad_x, b.y);
  EXPECT_TRUE(r.skipped);
  for (const auto& [name, a] : p) EXPECT_TRUE(a.bit_equal(before[name])) << name << " was overwritten";
  for (const auto& [name, a] : std::get<0>(out)) EXPECT_TRUE(a.bit_equal(before[name])) << name;
}

TEST(Donation, AnArrayPassedTwiceIsNotDonated) {
  auto f = jit([](const Tensor& a, const Tensor& b) { return a + b; },
               JitOptions{.name = "twice", .donate_argnums = {0}});
  Array a = Array::from_vector<float>({1, 2});
  Array out = a;
  f.run_into(out, a, a);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace fjit

namespace fjit {
namespace {

// run_into(state, std::get<0>(state), ...): the output dict is the very object passed as the
// argument. The step reads the argument before replacing it, with and without donation, under
// jit and pmap, and gives what separate objects give.
TEST(Donation, AnOutputThatIsTheArgumentObjectItselfIsReadBeforeItIsReplaced) {
  Batch b;
  for (std::vector<int> donate : {std::vector<int>{}, std::vector<int>{0}}) {
    auto separate = make_step({}), same = make_step(donate);
    ArrayDict ref = params();
    std::tuple<ArrayDict, Array> state{deep_copy(params()), Array()};
    for (int step = 0; step < 4; ++step) {
      auto [next, loss] = separate(ref, b.x, b.y);
      same.run_into(state, std::get<0>(state), b.x, b.y);
      ASSERT_TRUE(loss.bit_equal(std::get<1>(state))) << "step " << step;
      for (const auto& [name, a] : next) ASSERT_TRUE(a.bit_equal(std::get<0>(state)[name])) << name;
      ref = next;
    }
  }
  Mesh mesh = Mesh::threads(2);
  auto pstep = pmap(mesh, "b", [](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
    return std::tuple{sgd(p, pmean(g, "b"), 0.1), pmean(loss, "b")};
  });
  ArrayDict ref = mesh.replicate(params());
  std::tuple<ArrayDict, Array> state{mesh.replicate(params()), Array()};
  for (int step = 0; step < 3; ++step) {
    auto [next, loss] = pstep(ref, b.x, b.y);
    pstep.run_into(state, std::get<0>(state), b.x, b.y);
    ASSERT_TRUE(loss.bit_equal(std::get<1>(state))) << "pmap step " << step;
    for (const auto& [name, a] : next) ASSERT_TRUE(a.bit_equal(std::get<0>(state)[name])) << name;
    ref = next;
  }
}

}  // namespace
}  // namespace fjit
