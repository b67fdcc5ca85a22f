// The language-model trainer (parallel/lm/lm_trainer.h) on tests/tiny_lm.h's run, replicated
// and with --zero 1, 2 or 3, for tests/zero_lm_trainer_test.cc (thread replicas) and
// tests/mpi/zero_lm_mpi_test.cc (MPI ranks): six steps straight, or three steps then a
// checkpoint resumed on another mesh. A global batch of 6 divides over 1, 2 and 3 replicas.
// Test-only, header-only.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "parallel/lm/lm_trainer.h"
#include "parallel/train/zero.h"
#include "tests/tiny_lm.h"

namespace fjit::testing {

// tiny_lm_options in `dir` at `zero_stage`, stopping after `max_steps` of the 6, without
// checkpoints of its own (the tests save and load by path).
inline lm::LmOptions zero_lm_options(const std::filesystem::path& dir, int zero_stage, int64_t max_steps) {
  lm::LmOptions o = tiny_lm_options(dir, 6);
  o.token_file = (dir / "corpus.tokens").string();
  o.checkpoint_dir.clear();
  o.max_steps = max_steps;
  o.zero_stage = zero_stage;
  return o;
}

struct ZeroLmRun {
  std::vector<uint32_t> losses, norms;  // the bits of each step's
  ArrayDict params;
  ArrayDict state;  // the whole optimizer state (gathered at ZeRO)
  ArrayDict local_state;  // what this process held: at ZeRO its replicas' shards
  ArrayDict local_params;  // the trained parameters this process held: at stage 3 its shards
};

// Steps `t` to its end, recording each step's loss and gradient norm.
inline ZeroLmRun zero_lm_finish(lm::LmTrainer& t) {
  ZeroLmRun r;
  while (auto s = t.step()) {
    r.losses.push_back(std::bit_cast<uint32_t>(static_cast<float>(s->loss)));
    r.norms.push_back(std::bit_cast<uint32_t>(static_cast<float>(t.last_grad_norm())));
  }
  r.params = t.params();
  r.local_state = t.optimizer_state();
  r.local_params = t.local_trainable_params();
  r.state = t.options().zero_stage
                ? training::zero_gather_state(t.optimizer_state(), t.trainable_params(), t.mesh())
                : t.optimizer_state();
  return r;
}

// Six steps on `mesh` (every process calls it; `dir` one directory for them all).
inline ZeroLmRun zero_lm_run(const Mesh& mesh, const std::filesystem::path& dir, int zero_stage) {
  lm::LmTrainer t(mesh, zero_lm_options(dir, zero_stage, -1));
  return zero_lm_finish(t);
}

// Three steps on `mesh`, then a checkpoint at `path`.
inline void zero_lm_train_and_save(const Mesh& mesh, const std::filesystem::path& dir, int zero_stage,
                                   const std::string& path) {
  lm::LmTrainer t(mesh, zero_lm_options(dir, zero_stage, 3));
  while (t.step()) {
  }
  ASSERT_EQ(t.steps_done(), 3);
  t.save(path);
}

// `path` resumed on `mesh` and trained to step 6.
inline ZeroLmRun zero_lm_resume(const Mesh& mesh, const std::filesystem::path& dir, int zero_stage,
                                const std::string& path) {
  lm::LmTrainer t(mesh, zero_lm_options(dir, zero_stage, -1));
  t.load(path);
  EXPECT_EQ(t.steps_done(), 3);
  return zero_lm_finish(t);
}

// Bit for bit: losses, gradient norms, parameters and the whole optimizer state.
inline void expect_same_lm_run(const ZeroLmRun& ref, const ZeroLmRun& got, size_t steps) {
  ASSERT_EQ(ref.losses.size(), steps);
  ASSERT_EQ(got.losses.size(), steps);
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_EQ(ref.losses[i], got.losses[i]) << "loss of step " << i;
    EXPECT_EQ(ref.norms[i], got.norms[i]) << "gradient norm of step " << i;
  }
  ASSERT_EQ(ref.params.names(), got.params.names());
  for (const auto& [name, p] : ref.params) EXPECT_TRUE(p.bit_equal(got.params.at(name))) << "parameter " << name;
  ASSERT_EQ(ref.state.names(), got.state.names());
  for (const auto& [name, s] : ref.state) EXPECT_TRUE(s.bit_equal(got.state.at(name))) << "state " << name;
}

// Two checkpoints hold the same tensors, bit for bit (names, dtypes, shapes, values).
inline void expect_same_lm_checkpoint_tensors(const std::string& a, const std::string& b) {
  const io::Checkpoint ca = io::load_checkpoint(a), cb = io::load_checkpoint(b);
  ASSERT_EQ(ca.tensors.size(), cb.tensors.size()) << a << " vs " << b;
  for (size_t i = 0; i < ca.tensors.size(); ++i) {
    EXPECT_EQ(ca.tensors[i].first, cb.tensors[i].first);
    EXPECT_TRUE(ca.tensors[i].second.bit_equal(cb.tensors[i].second)) << ca.tensors[i].first;
  }
}

}  // namespace fjit::testing
