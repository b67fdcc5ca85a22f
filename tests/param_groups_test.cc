// Parameter groups (core/lib/param_groups.h) against a host loop in double of torch.optim.AdamW
// with param_groups: each group its own lr and weight decay; the state keeps the optimizer's
// names and order. split_trainable and the errors naming a pattern that selects nothing.
#include <gtest/gtest.h>

#include <cmath>

#include "core/lib/param_groups.h"
#include "parallel/fjit.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

Array f64(std::vector<double> v) { return Array::from_vector(v); }

// One coordinate of torch.optim.AdamW over the gradient sequence gs.
double adamw_by_hand(double p, const std::vector<double>& gs, double lr, double wd) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  double m = 0, v = 0;
  for (size_t t = 1; t <= gs.size(); ++t) {
    const double g = gs[t - 1];
    p *= 1 - lr * wd;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double bc1 = 1 - std::pow(b1, static_cast<double>(t)), bc2 = 1 - std::pow(b2, static_cast<double>(t));
    p -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  }
  return p;
}

const ArrayDict kParams = {{"block0/w", f64({1.0, -2.0})}, {"block0/b", f64({0.5})},
                           {"norm/g", f64({1.5})}, {"head/w", f64({0.3, -0.7})}};
// Per step, per name, the gradient.
std::vector<ArrayDict> grads_sequence() {
  std::vector<ArrayDict> gs;
  for (int t = 0; t < 3; ++t) {
    const double s = 1.0 + t;
    gs.push_back({{"block0/w", f64({0.5 * s, -0.25})}, {"block0/b", f64({-1.0 / s})},
                  {"norm/g", f64({0.2 * s})}, {"head/w", f64({-0.1, 0.3 * s})}});
  }
  return gs;
}

TEST(ParamGroups, AdamWWithTwoGroupsMatchesTorchParamGroups) {
  const double lr = 0.05, wd = 0.1;
  const std::vector<ParamGroup> groups = {
      {.name = "no_decay", .patterns = {"*/b", "*/g"}, .weight_decay = 0.0},
      {.name = "head", .patterns = {"head/*"}, .lr_scale = 0.25, .weight_decay = 0.5}};
  // The learning rate traced (as a schedule gives it) and baked in: the same numbers.
  for (const bool traced_lr : {false, true}) {
    auto step = jit([&](const Params& p, const Params& g, const Params& s, const Tensor& rate) {
      const AdamW opt{.lr = traced_lr ? Scalar(rate) : Scalar(lr), .weight_decay = wd};
      auto [p2, s2] = grouped_update(opt, groups, p, g, s);
      return std::tuple{p2, s2};
    });
    ArrayDict p = kParams, s = AdamW{}.init_state(kParams);
    const std::vector<ArrayDict> gs = grads_sequence();
    for (const ArrayDict& g : gs) std::tie(p, s) = step(p, g, s, Array::scalar<double>(lr));
    EXPECT_EQ(s.names(), AdamW{}.init_state(kParams).names()) << "the state keeps AdamW's names and order";
    EXPECT_EQ(s.at("step").item<int32_t>(), 3);
    // name -> (lr, wd) of its group.
    const std::map<std::string, std::pair<double, double>> settings = {
        {"block0/w", {lr, wd}}, {"block0/b", {lr, 0.0}}, {"norm/g", {lr, 0.0}}, {"head/w", {lr * 0.25, 0.5}}};
    for (const auto& [name, a] : kParams) {
      for (int64_t i = 0; i < a.size(); ++i) {
        std::vector<double> g_i;
        for (const ArrayDict& g : gs) g_i.push_back(g.at(name).data<double>()[i]);
        const auto [lr_k, wd_k] = settings.at(name);
        EXPECT_NEAR(p.at(name).data<double>()[i], adamw_by_hand(a.data<double>()[i], g_i, lr_k, wd_k), 1e-12)
            << name << "[" << i << "] traced lr " << traced_lr;
      }
    }
  }
}

TEST(ParamGroups, NoGroupsIsThePlainUpdate) {
  const AdamW opt{.lr = 0.01};
  auto plain = jit([&](const Params& p, const Params& g, const Params& s) { return opt.update(p, g, s).first; });
  auto grouped = jit([&](const Params& p, const Params& g, const Params& s) {
    return grouped_update(opt, {}, p, g, s).first;
  });
  const ArrayDict s = opt.init_state(kParams), g = grads_sequence()[0];
  const ArrayDict a = plain(kParams, g, s), b = grouped(kParams, g, s);
  for (const auto& [name, x] : a)
    for (int64_t i = 0; i < x.size(); ++i) EXPECT_EQ(x.data<double>()[i], b.at(name).data<double>()[i]) << name;
}

TEST(ParamGroups, FirstMatchingGroupWins) {
  const std::vector<ParamGroup> groups = {{.name = "a", .patterns = {"block0/*"}}, {.name = "b", .patterns = {"*/b"}}};
  EXPECT_EQ(param_group_indices(groups, {"block0/b", "x/b", "y/w"}), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(describe(groups), "a(block0/*: lr x1) b(*/b: lr x1)");
}

TEST(ParamGroups, AGroupThatSelectsNothingIsAnErrorNamingIt) {
  // One pattern of a group may select nothing (a model without biases), the whole group may not.
  {
    const std::vector<ParamGroup> lenient = {{.name = "no_decay", .patterns = {"*/b", "*/bias"}, .weight_decay = 0.0}};
    EXPECT_NO_THROW(check_param_groups(lenient, kParams.names()));
  }
  const std::vector<ParamGroup> groups = {{.name = "no_decay", .patterns = {"*/bias", "*/beta"}, .weight_decay = 0.0}};
  const std::string what = error_of<std::invalid_argument>([&] {
    jit([&](const Params& p, const Params& g, const Params& s) {
      return grouped_update(AdamW{}, groups, p, g, s).first;
    })(kParams, grads_sequence()[0], AdamW{}.init_state(kParams));
  });
  EXPECT_NE(what.find("parameter group 'no_decay': its patterns (*/bias, */beta) select no parameter"), std::string::npos) << what;
  EXPECT_NE(what.find("block0/w"), std::string::npos) << "names some parameters: " << what;
  // Checked against the names given instead (a step's frozen parameters among them).
  EXPECT_NO_THROW(check_param_groups(groups, {"block0/b", "frozen/bias"}));
  EXPECT_THROW(check_param_groups(groups, {"block0/w", "block0/b"}), std::invalid_argument);
}

TEST(SplitTrainable, SplitsInOrderAndNamesAPatternThatSelectsNothing) {
  auto [trainable, frozen] = split_trainable(kParams, {"*/b", "head/*"});
  EXPECT_EQ(trainable.names(), (std::vector<std::string>{"block0/b", "head/w"}));
  EXPECT_EQ(frozen.names(), (std::vector<std::string>{"block0/w", "norm/g"}));
  const std::string what = error_of<std::invalid_argument>([&] { split_trainable(kParams, {"*/b", "lora_a"}); });
  EXPECT_NE(what.find("pattern 'lora_a' (of '*/b,lora_a') selects no parameter"), std::string::npos) << what;
  EXPECT_NE(what.find("block0/w"), std::string::npos) << what;
}

}  // namespace
}  // namespace fjit
