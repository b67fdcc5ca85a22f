// The examples' MLP trainer run for 20 steps replicated and with --zero 1 or 2, for
// tests/zero_trainer_test.cc (thread replicas) and tests/mpi/zero_mpi_test.cc (MPI ranks),
// and the same stopped at step 10, checkpointed, and resumed on another mesh.
// Test-only, header-only.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lib/trainer.h"
#include "parallel/train/zero.h"
#include "tests/fixture_data.h"

namespace fjit::testing {

// Layers 784-37-10: parameter sizes 29008, 37, 370 and 10, which 2 and 3 do not all divide;
// batches of 8 split unevenly over 3 replicas.
inline training::TrainOptions zero_trainer_options(int zero_stage) {
  training::TrainOptions o;
  o.model = "mlp";
  o.layers = {784, 37, 10};
  o.batch_size = 8;
  o.epochs = 100;
  o.max_steps = 20;
  o.seed = 5;
  o.log_every = 0;
  o.eval_batch_size = 8;
  o.zero_stage = zero_stage;
  return o;
}

// The MLP's initial parameters (784x37, 37, 37x10, 10).
inline ArrayDict zero_test_params() {
  return examples::Trainer(Mesh::threads(1), zero_trainer_options(0), fixture()).params();
}

struct ZeroTrainerRun {
  std::vector<float> losses;
  ArrayDict params;
};

inline ZeroTrainerRun zero_trainer_run(const Mesh& mesh, int zero_stage) {
  examples::Trainer t(mesh, zero_trainer_options(zero_stage), fixture());
  ZeroTrainerRun run;
  while (auto s = t.step()) run.losses.push_back(s->loss);
  run.params = t.params();
  return run;
}

inline void expect_same_training(const ZeroTrainerRun& ref, const ZeroTrainerRun& zero) {
  ASSERT_EQ(ref.losses.size(), 20u);
  ASSERT_EQ(zero.losses.size(), 20u);
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(ref.losses[i]), std::bit_cast<uint32_t>(zero.losses[i])) << "step " << i + 1;
  for (const auto& [name, p] : ref.params)
    EXPECT_TRUE(p.bit_equal(zero.params.at(name))) << "parameter " << name << " after 20 steps";
  EXPECT_NE(ref.losses.front(), ref.losses.back());  // it trained
}

// Runs from a checkpoint: a global batch of 12, which divides over 1, 2, 3 and 4 replicas
// (resuming at another count needs it), 20 steps in all.
inline training::TrainOptions zero_resume_options(int zero_stage, int64_t max_steps) {
  training::TrainOptions o = zero_trainer_options(zero_stage);
  o.batch_size = 12;
  o.eval_batch_size = 12;
  o.max_steps = max_steps;
  return o;
}

// 10 steps on `mesh` at `zero_stage`, then a checkpoint at `path` (every process calls it).
inline void zero_train_and_save(const Mesh& mesh, int zero_stage, const std::string& path) {
  examples::Trainer t(mesh, zero_resume_options(zero_stage, 10), fixture());
  while (t.step()) {
  }
  ASSERT_EQ(t.steps_done(), 10);
  t.save(path);
}

// Resumes `path` on `mesh` at `zero_stage` and trains to step 20: the losses of steps 11..20
// and the final parameters; `state` gets the whole optimizer state at the end.
inline ZeroTrainerRun zero_resume_run(const Mesh& mesh, int zero_stage, const std::string& path,
                                      ArrayDict* state = nullptr) {
  examples::Trainer t(mesh, zero_resume_options(zero_stage, 20), fixture());
  t.load(path);
  EXPECT_EQ(t.steps_done(), 10);
  ZeroTrainerRun run;
  while (auto s = t.step()) run.losses.push_back(s->loss);
  EXPECT_EQ(run.losses.size(), 10u);
  run.params = t.params();
  if (state)
    *state = zero_stage ? training::zero_gather_state(t.optimizer_state(), t.params(), mesh) : t.optimizer_state();
  return run;
}

// Bit for bit: the same losses and parameters.
inline void expect_same_resumed(const ZeroTrainerRun& ref, const ZeroTrainerRun& got) {
  ASSERT_EQ(ref.losses.size(), got.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(ref.losses[i]), std::bit_cast<uint32_t>(got.losses[i])) << "step " << i + 11;
  for (const auto& [name, p] : ref.params)
    EXPECT_TRUE(p.bit_equal(got.params.at(name))) << "parameter " << name << " after step 20";
}

// Two checkpoints hold the same tensors, bit for bit (names, dtypes, shapes, values).
inline void expect_same_checkpoint_tensors(const std::string& a, const std::string& b) {
  const io::Checkpoint ca = io::load_checkpoint(a), cb = io::load_checkpoint(b);
  ASSERT_EQ(ca.tensors.size(), cb.tensors.size()) << a << " vs " << b;
  for (size_t i = 0; i < ca.tensors.size(); ++i) {
    EXPECT_EQ(ca.tensors[i].first, cb.tensors[i].first);
    EXPECT_TRUE(ca.tensors[i].second.bit_equal(cb.tensors[i].second)) << ca.tensors[i].first;
  }
}

}  // namespace fjit::testing
