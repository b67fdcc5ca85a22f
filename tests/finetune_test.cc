// Training a few parameters of many (parallel/lm/lm_step.h's LmSplitStepFn) with two thread
// replicas, against the same step with every parameter trainable:
//   - the all-reduce moves the trainable gradients' bytes alone (metrics deltas);
//   - the optimizer state has entries for trainable names only;
//   - the plan computes no weight gradient for frozen matrices: its matmul flops are lower by
//     exactly 2 * rows * in * out per frozen matrix (closed form);
//   - frozen parameters come back bit-identical, trainable ones change, and two steps give the
//     parameters and losses of an oracle on one replica: value_and_grad over every parameter,
//     the frozen gradients dropped, then clipping and AdamW (with parameter groups) on the rest.
#include <gtest/gtest.h>

#include <cmath>

#include "core/lib/param_groups.h"
#include "core/ir/convert.h"
#include "parallel/fjit.h"
#include "parallel/lm/finetune_main.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

DecoderConfig small_gpt() {
  DecoderConfig c;
  c.vocab = 13;
  c.context = 8;
  c.dim = 16;
  c.layers = 2;
  c.heads = 2;
  return c;
}

constexpr int64_t kRows = 4;  // global batch: 2 rows per replica

Array token_ids(uint32_t salt) {
  std::vector<int32_t> v(kRows * 8);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>((i * 7 + salt * 5 + i / 3) % 13);
  return Array::from_vector(v, {kRows, 8});
}

lm::LmStepFn step_fn(const DecoderConfig& c) {
  return lm::LmStepFn{.model = c,
                      .optimizer = AdamW{.lr = 1e-2, .weight_decay = 0.1},
                      .schedule = Schedule::constant(1e-2),
                      .clip_grad_norm = 0.5,
                      .groups = {{.name = "no_decay", .patterns = {"*/b", "*/g"}, .weight_decay = 0.0}}};
}

// The embeddings, biases and norm gains are trained; every matrix "*/w" is frozen. The token
// table is also the output head (tied), so the backward pass still runs through every block:
// only the frozen matrices' weight gradients drop out.
const std::vector<std::string> kTrained = {"tok/table", "pos/table", "*/b", "*/g"};

struct RunResult {
  ArrayDict trainable, state;
  std::vector<float> losses;
  int64_t allreduce_bytes = 0;  // one step's, after the first
  int64_t flops = 0;
};

RunResult run_steps(const ArrayDict& trainable, const ArrayDict& frozen, int steps) {
  const DecoderConfig c = small_gpt();
  Mesh mesh = Mesh::threads(2);
  PmapOptions o;
  o.jit.checks = CheckMode::user;
  lm::LmSplitStep step = lm::make_lm_split_step(mesh, step_fn(c), o);
  RunResult r{.trainable = mesh.replicate(trainable), .state = {}};
  r.state = mesh.replicate(AdamW{}.init_state(trainable));
  const ArrayDict frozen_r = mesh.replicate(frozen);
  for (int k = 0; k < steps; ++k) {
    const int64_t before = metrics().allreduce_bytes.load();
    lm::LmStepOut out;
    step.run_into(out, r.trainable, frozen_r, r.state, token_ids(k), token_ids(k + 1),
                  Array::scalar<int32_t>(k), Array::scalar(1.0f));
    if (k == 1) r.allreduce_bytes = metrics().allreduce_bytes.load() - before;
    r.trainable = std::get<0>(out);
    r.state = std::get<1>(out);
    r.losses.push_back(std::get<2>(out).item<float>());
  }
  r.flops = step.core().entry(0).exe->flops;
  return r;
}

ArrayDict model_params() {
  ArrayDict p;
  decoder_params(p, small_gpt(), 5);
  return p;
}

int64_t bytes_of(const ArrayDict& d) {
  int64_t n = 0;
  for (const auto& [name, a] : d) n += static_cast<int64_t>(a.nbytes());
  return n;
}

TEST(Finetune, FrozenParametersMoveNoBytesHaveNoStateAndNoWeightGradients) {
  const ArrayDict all = model_params();
  auto [trainable, frozen] = split_trainable(all, kTrained);
  ASSERT_GT(frozen.size(), 0u);
  const RunResult full = run_steps(all, {}, 2);
  const RunResult part = run_steps(trainable, frozen, 2);

  // All-reduce: the difference is exactly the frozen gradients' bytes, and what the partial
  // step moves beyond its trainable gradients is what the full step moves beyond all of its.
  EXPECT_EQ(full.allreduce_bytes - part.allreduce_bytes, bytes_of(frozen));
  EXPECT_EQ(part.allreduce_bytes - bytes_of(trainable), full.allreduce_bytes - bytes_of(all));
  EXPECT_LT(part.allreduce_bytes - bytes_of(trainable), 64) << "a few scalars besides the gradients";

  // Optimizer state: AdamW's entries for the trainable names only.
  EXPECT_EQ(part.state.names(), AdamW{}.init_state(trainable).names());
  for (const auto& [name, a] : frozen) {
    EXPECT_FALSE(part.state.contains("m." + name)) << name;
    EXPECT_FALSE(part.state.contains("v." + name)) << name;
  }

  // Plan: each frozen matrix W [in, out] saves its dW = x^T dy, 2 * rows * in * out flops,
  // rows = this replica's tokens.
  const int64_t rows = kRows / 2 * small_gpt().context;
  int64_t saved = 0;
  for (const auto& [name, a] : frozen)
    if (a.rank() == 2) saved += 2 * rows * a.shape()[0] * a.shape()[1];
  ASSERT_GT(saved, 0);
  EXPECT_EQ(full.flops - part.flops, saved) << "full " << full.flops << " frozen " << part.flops;
}

TEST(Finetune, FrozenStayBitIdenticalAndTrainedMatchAnOracle) {
  const DecoderConfig c = small_gpt();
  const ArrayDict all = model_params();
  auto [trainable, frozen] = split_trainable(all, kTrained);
  std::vector<Array> frozen_before;
  for (const auto& [name, a] : frozen) frozen_before.push_back(a.clone());
  const RunResult part = run_steps(trainable, frozen, 2);
  for (size_t i = 0; i < frozen.size(); ++i)
    EXPECT_TRUE(frozen.value(i).bit_equal(frozen_before[i])) << frozen.name(i) << " was written";
  for (const auto& [name, a] : trainable)
    EXPECT_FALSE(part.trainable.at(name).bit_equal(a)) << name << " did not move";

  // Oracle: one replica, the whole batch; gradients of every parameter, the frozen dropped.
  const lm::LmStepFn fn = step_fn(c);
  auto oracle = jit([&](const Params& t, const Params& f, const Params& s, const Tensor& x,
                        const Tensor& y, const Tensor& step) {
    auto loss_fn = [&](const Params& everything) {
      return mean(softmax_cross_entropy(decoder_logits(everything, c, x), y));
    };
    Params everything = f;
    for (const auto& [name, p] : t) everything.set(name, p);
    auto [loss, grads] = value_and_grad(loss_fn)(everything);
    TensorDict g;
    for (const auto& [name, p] : t) g.set(name, grads.at(name));
    AdamW opt = fn.optimizer;
    opt.lr = fn.schedule(step);
    auto [t2, s2] = grouped_update(opt, fn.groups, t, clip_by_global_norm(g, fn.clip_grad_norm), s,
                                   nullptr);
    return std::tuple{t2, s2, loss};
  });
  ArrayDict t = trainable, s = AdamW{}.init_state(trainable);
  for (int k = 0; k < 2; ++k) {
    auto [t2, s2, loss] = oracle(t, frozen, s, token_ids(k), token_ids(k + 1), Array::scalar<int32_t>(k));
    EXPECT_NEAR(part.losses[k], loss.item<float>(), 1e-5) << "step " << k;
    t = t2;
    s = s2;
  }
  for (const auto& [name, a] : t) {
    const std::vector<float> want = a.to_vector<float>(), got = part.trainable.at(name).to_vector<float>();
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 2e-5 + 1e-4 * std::abs(want[i])) << name << "[" << i << "]";
  }
}

TEST(Finetune, AParameterBothTrainableAndFrozenIsAnError) {
  const ArrayDict all = model_params();
  auto [trainable, frozen] = split_trainable(all, kTrained);
  frozen.set("tok/table", all.at("tok/table"));
  const std::string what = error_of<std::invalid_argument>([&] { run_steps(trainable, frozen, 1); });
  EXPECT_NE(what.find("'tok/table' is both trainable and frozen"), std::string::npos) << what;
}

}  // namespace
}  // namespace fjit

namespace fjit {
namespace {

lm::ParsedLmOptions parse(std::vector<std::string> args, lm::LmOptions defaults = {}) {
  args.insert(args.begin(), "train_lm");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return lm::parse_lm_options(static_cast<int>(argv.size()), argv.data(), std::move(defaults));
}

TEST(LmOptions, NoDecayAndGroups) {
  const lm::ParsedLmOptions p = parse({"--no-decay", "*/b,*/g", "--group", "head:tok/*,pos/*:0.5:0.01",
                                       "--group", "slow:block0/*:0.1"});
  ASSERT_EQ(p.error, "");
  const std::vector<ParamGroup> g = lm::lm_param_groups(p.options);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].name, "head");
  EXPECT_EQ(g[0].patterns, (std::vector<std::string>{"tok/*", "pos/*"}));
  EXPECT_EQ(g[0].lr_scale, 0.5);
  EXPECT_EQ(g[0].weight_decay, 0.01);
  EXPECT_EQ(g[1].name, "slow");
  EXPECT_FALSE(g[1].weight_decay.has_value()) << "no WD: the optimizer's";
  EXPECT_EQ(g[2].name, "no_decay");
  EXPECT_EQ(g[2].weight_decay, 0.0);
  EXPECT_EQ(parse({"--no-decay", "none"}, p.options).options.no_decay.size(), 0u);
  EXPECT_NE(parse({"--group", "x:*/b"}).error.find("is not NAME:PATTERNS:LR_SCALE[:WD]"), std::string::npos);
  EXPECT_NE(parse({"--group", "x:*/b:fast"}).error.find("learning-rate scale 'fast'"), std::string::npos);
}

// train_lm's defaults decay every parameter and record the configuration they always did, so
// its checkpoints resume as before; groups and frozen parameters appear only when used.
TEST(LmOptions, DefaultsKeepTrainLmsConfiguration) {
  const lm::LmOptions o;
  EXPECT_TRUE(lm::lm_param_groups(o).empty());
  const io::RunConfig config = lm::run_config(o);
  EXPECT_EQ(config.at("optimizer"), "AdamW b2 0.95 weight decay 0.1 clip 1");
  EXPECT_FALSE(config.contains("trainable"));
  EXPECT_FALSE(config.contains("compute_dtype"));
  lm::LmOptions b = o;
  b.compute_dtype = "bf16";
  EXPECT_EQ(lm::run_config(b).at("compute_dtype"), "bf16");
  lm::LmOptions f = o;
  f.no_decay = {"*/b", "*/g"};
  f.trainable = {"lora_a", "lora_b"};
  EXPECT_EQ(lm::run_config(f).at("optimizer"), "AdamW b2 0.95 weight decay 0.1 clip 1 groups no_decay(*/b,*/g: lr x1, wd 0)");
  EXPECT_EQ(lm::run_config(f).at("trainable"), "lora_a,lora_b");
}

// A half-precision base (bf16 here): the trained weights get f32 master copies (AdamW runs in
// f32), the frozen ones stay bf16 for the layers to cast as they read them.
TEST(FinetuneStart, TrainedHalfPrecisionWeightsGetF32MasterCopies) {
  const testing::ScopedTempDir tmp("fjit-finetune-bf16");
  const std::string dir = tmp.path() + "/base";
  DecoderConfig c = small_gpt();
  ArrayDict f32;
  decoder_params(f32, c, 3);
  ArrayDict bf16;
  for (const auto& [name, a] : f32) {
    Array h(DType::bf16, a.shape());
    for (int64_t i = 0; i < a.size(); ++i) set_element_from_double(DType::bf16, h.raw(), i, a.at_as_double(i));
    bf16.set(name, h);
  }
  hf::save_hf_model(dir, hf::hf_model_for(c, bf16));
  lm::FinetuneOptions o = lm::finetune_defaults();
  o.lm.init_from = dir;
  o.lora_rank = 0;  // full fine-tuning: every weight trained
  for (const auto& [name, a] : lm::finetune_start(o).params) EXPECT_EQ(a.dtype(), DType::f32) << name;
  o.lora_rank = 2;
  o.lora_targets = {"attn/qkv"};
  o.train = {"norm/*"};
  for (const auto& [name, a] : lm::finetune_start(o).params) {
    const bool trained = is_lora_param(name) || name.rfind("norm/", 0) == 0;
    EXPECT_EQ(a.dtype(), trained ? DType::f32 : DType::bf16) << name;
  }
}

}  // namespace
}  // namespace fjit
