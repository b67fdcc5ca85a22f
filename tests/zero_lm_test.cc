// ZeRO stages 1, 2 and 3 in the language model's step (parallel/lm/lm_step.h,
// parallel/train/zero.h) on 1, 2 and 3 thread replicas: 12 steps of a tiny decoder, with
// clipping to a global norm that binds, a parameter group without weight decay, and a batch
// that 2 and 3 split unevenly, give the replicated step's parameters, losses and gradient norms
// bit for bit (at stage 3 the parameters' shards gathered whole); each replica's state is its
// slice of the replicated state; stage 4, and loss scaling at stages 2 and 3, are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/lib/initializers.h"
#include "core/nn/decoder.h"
#include "parallel/lm/lm_step.h"
#include "tests/zero_testing.h"

namespace fjit {
namespace {

DecoderConfig tiny_decoder() {
  return {.vocab = 11, .context = 6, .dim = 8, .layers = 2, .heads = 2};
}

lm::LmStepFn step_fn(int zero_stage) {
  return {.model = tiny_decoder(),
          .optimizer = AdamW{.weight_decay = 0.1},
          .schedule = Schedule::constant(3e-2),
          .clip_grad_norm = 0.5,
          .groups = {{.name = "no_decay", .patterns = {"*/b"}, .weight_decay = 0.0}},
          .zero_stage = zero_stage};
}

// Global batch t (the run alternates two): 5 rows of 6 tokens, inputs and targets.
std::pair<Array, Array> batch(int t) {
  Array x(DType::i32, {5, 6}), y(DType::i32, {5, 6});
  SplitMix64 rng(77 + static_cast<uint64_t>(t));
  for (int64_t i = 0; i < 30; ++i) {
    x.data<int32_t>()[i] = static_cast<int32_t>(rng.next() % 11);
    y.data<int32_t>()[i] = static_cast<int32_t>(rng.next() % 11);
  }
  return {x, y};
}

testing::ZeroTestRun run(const Mesh& mesh, int zero_stage, int steps) {
  lm::LmStepFn fn = step_fn(zero_stage);
  ArrayDict params;
  decoder_params(params, tiny_decoder(), 4);
  const std::vector<training::ZeroParamShape> shapes = training::zero_param_shapes(params);
  ArrayDict state = zero_stage ? training::zero_init_state(params, mesh) : AdamW{}.init_state(params);
  if (zero_stage == 3) {
    fn.zero3_shapes = shapes;
    params = training::zero_shard_params(params, mesh);
  }
  lm::LmStep step = lm::make_lm_step(mesh, fn, PmapOptions{});
  testing::ZeroTestRun r;
  for (int t = 0; t < steps; ++t) {
    auto [x, y] = batch(t % 2);
    auto [p2, s2, loss, norm] = step(params, state, x, y, Array::scalar<int32_t>(t));
    if (zero_stage) {
      std::vector<const std::vector<Array>*> others;
      for (int k = 1; k < mesh.local_size(); ++k) others.push_back(&step.replica_outputs(k));
      s2 = training::zero_local_state(s2, others, p2.size());
      if (zero_stage == 3) p2 = training::zero_local_state(p2, others, 0);
    }
    params = std::move(p2);
    state = std::move(s2);
    r.params.push_back(zero_stage == 3 ? training::zero_gather_params(params, shapes, mesh) : params);
    r.losses.push_back(testing::bits_of(loss));
    r.norms.push_back(testing::bits_of(norm));
  }
  r.state = std::move(state);
  return r;
}

void expect_stage_is_bit_identical(int stage) {
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << n << " replicas, stage " << stage);
    const Mesh mesh = Mesh::threads(n);
    const auto ref = run(mesh, 0, 12);
    const auto zero = run(mesh, stage, 12);
    testing::expect_same_bits(ref, zero, "zero lm");
    testing::expect_state_is_slices(ref.state, zero.state, n, 0, n);
    float first, last;
    std::memcpy(&first, &ref.losses.front(), sizeof first);
    std::memcpy(&last, &ref.losses.back(), sizeof last);
    EXPECT_LT(last, first);  // it trained
    float norm;
    std::memcpy(&norm, &ref.norms.front(), sizeof norm);
    EXPECT_GT(norm, 0.5f);  // the clipping bound binds
  }
}

TEST(ZeroLm, Stage1IsBitIdenticalToTheReplicatedStep) { expect_stage_is_bit_identical(1); }
TEST(ZeroLm, Stage2IsBitIdenticalToTheReplicatedStep) { expect_stage_is_bit_identical(2); }
TEST(ZeroLm, Stage3IsBitIdenticalToTheReplicatedStep) { expect_stage_is_bit_identical(3); }

TEST(ZeroLm, UnsupportedStagesAreRefused) {
  EXPECT_THROW(lm::make_lm_step(Mesh::threads(2), step_fn(4), PmapOptions{}), std::invalid_argument);
  lm::LmStepFn scaled = step_fn(2);
  scaled.scaling.on = true;
  EXPECT_THROW(lm::make_lm_step(Mesh::threads(2), scaled, PmapOptions{}), std::invalid_argument);
  // Stage 3 without the parameters' shapes.
  EXPECT_THROW(lm::make_lm_step(Mesh::threads(2), step_fn(3), PmapOptions{}), std::invalid_argument);
}

}  // namespace
}  // namespace fjit
