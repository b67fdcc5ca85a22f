// The language model trained with AdamW on a 2 x 2 ("data" x "model") grid of thread replicas
// (parallel/train/tensor_parallel_update.h) against the language model's own data-parallel step
// (parallel/lm/lm_step.h) on 4 replicas, with weight decay, a group without it, and clipping
// to a global norm that binds at every step: the losses, the gradient norms and the final
// parameters agree.
//
// Tolerance: 1e-5 relative for the losses and norms, and for the parameters 1e-5 of the
// largest parameter's magnitude. The split changes only the order of sums (each replica's
// heads and hidden features are summed apart, then psum'd), so the two runs differ by f32
// rounding; AdamW's m / sqrt(v) turns a gradient's relative rounding into about as large a
// relative change of its step, and the steps (lr 3e-3) are small against the parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>

#include "fjit.h"
#include "tests/tensor_parallel_testing.h"

namespace fjit {
namespace {

constexpr double kRel = 1e-5;

lm::LmStepFn step_fn(const DecoderConfig& c) {
  return {.model = c,
          .optimizer = AdamW{.weight_decay = 0.1},
          .schedule = Schedule::constant(3e-3),
          .clip_grad_norm = 0.25,
          .groups = {{.name = "no_decay", .patterns = {"*/b", "*/g"}, .weight_decay = 0.0}}};
}

double rel(double a, double b) { return std::abs(a - b) / std::abs(b); }

void expect_two_by_two_adamw_trains_as_four_way_data(const DecoderConfig& c, const char* label) {
  const lm::LmStepFn fn = step_fn(c);
  ArrayDict p;
  decoder_params(p, c, 5);
  const Array ids = testing::token_ids(8, c.context, c.vocab, 21), labels = testing::token_ids(8, c.context, c.vocab, 22);
  auto dp = lm::make_lm_step(Mesh::threads(4), fn, PmapOptions{});
  auto tp = testing::lm_tensor_parallel_adamw_step(Mesh::threads({{"data", 2}, {"model", 2}}), fn);
  ArrayDict pd = p, sd = fn.optimizer.init_state(p);
  ArrayDict pt = tp_decoder_params(p, c), st = fn.optimizer.init_state(pt);
  constexpr int kSteps = 6;
  std::printf("%s: %s\nAdamW lr 3e-3, weight decay 0.1 (none on biases and gains), clip 0.25\n"
              "step  loss 4-way data  loss 2 data x 2 model  norm 4-way data  norm 2x2\n",
              label, c.describe().c_str());
  float first = 0, last = 0;
  for (int s = 0; s < kSteps; ++s) {
    auto [pd2, sd2, ld, nd] = dp(pd, sd, ids, labels, Array::scalar<int32_t>(s));
    auto [pt2, st2, lt, nt] = tp(pt, st, ids, labels, Array::scalar<int32_t>(s));
    const double a = ld.item<float>(), b = lt.item<float>(), na = nd.item<float>(), nb = nt.item<float>();
    std::printf("%d     %.9g      %.9g            %.9g      %.9g\n", s, a, b, na, nb);
    EXPECT_LE(rel(b, a), kRel) << label << " step " << s << " loss";
    EXPECT_LE(rel(nb, na), kRel) << label << " step " << s << " gradient norm";
    EXPECT_GT(na, 0.25) << label << " step " << s << ": the clip does not bind";
    if (s == 0) first = static_cast<float>(a);
    last = static_cast<float>(a);
    pd = std::move(pd2);
    sd = std::move(sd2);
    pt = std::move(pt2);
    st = std::move(st2);
  }
  EXPECT_LT(last, first) << label << ": it trained";
  testing::expect_near_dict(pt, tp_decoder_params(pd, c), fmt::format("{} parameters", label), kRel);
  // Each replica kept its blocks' state: the first moments, assembled, are the unsplit ones.
  ArrayDict md, mt;
  for (const auto& [name, a] : sd)
    if (name.rfind("m.", 0) == 0) md.set(name, a);
  for (const auto& [name, a] : st)
    if (name.rfind("m.", 0) == 0) mt.set(name, a);
  for (int64_t i = 0; i < c.layers; ++i) md = tp_attention_params(md, fmt::format("m.block{}/attn", i));
  testing::expect_near_dict(mt, md, fmt::format("{} first moments", label), kRel);
}

DecoderConfig gpt() { return testing::tiny_gpt(); }
DecoderConfig llama() { return testing::tiny_llama(); }

TEST(TensorParallelAdamW, GptStyleOnTwoByTwoMatchesTheFourWayDataParallelLmStep) {
  expect_two_by_two_adamw_trains_as_four_way_data(gpt(), "gpt");
}

TEST(TensorParallelAdamW, LlamaStyleOnTwoByTwoMatchesTheFourWayDataParallelLmStep) {
  expect_two_by_two_adamw_trains_as_four_way_data(llama(), "llama");
}

// Dropping the psum over "model" would count each replica's blocks alone: the norm the 2 x 2
// step reports is the whole model's, above what either replica's own blocks give.
TEST(TensorParallelAdamW, TheGlobalNormSumsTheSplitGradientsOverTheModelAxis) {
  const ShardSpec spec = ShardSpec::dict({{"w", {"model"}}});
  auto norms = shard_map(
      [spec](const TensorDict& g) {
        TensorDict local;
        local.set("w", g["w"]);
        return std::tuple{training::tp_global_norm(g, spec, "model"), global_norm(local)};
      },
      Mesh::threads({{"model", 2}}), {spec}, {{}, {}});
  ArrayDict g;
  g.set("w", Array::full(DType::f32, {4}, 0.0));
  g.set("b", Array::full(DType::f32, {2}, 2.0));  // replicated: counted once
  for (int i = 0; i < 4; ++i) g["w"].data<float>()[i] = static_cast<float>(i + 1);  // 1 2 | 3 4
  auto [norm, local] = norms(g);
  EXPECT_FLOAT_EQ(norm.item<float>(), std::sqrt(1.f + 4 + 9 + 16 + 4 + 4));
  EXPECT_FLOAT_EQ(local.item<float>(), std::sqrt(1.f + 4));  // replica 0's block alone
}

}  // namespace
}  // namespace fjit
