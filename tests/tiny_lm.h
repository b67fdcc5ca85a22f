// A language-model run small enough for a unit test: a one-layer decoder 16 wide with a
// context of 16, six steps, over a generated 200-line corpus written into `dir` (which must
// exist), checkpoints going to dir/ckpt.
#pragma once

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "parallel/lm/lm_options.h"
#include "parallel/lm/lm_verify.h"

namespace fjit::testing {

// The corpus of the tiny run, dir/corpus.txt.
inline void write_tiny_corpus(const std::filesystem::path& dir) {
  std::ofstream corpus(dir / "corpus.txt");
  for (int i = 0; i < 200; ++i) corpus << "the quick brown fox " << i << " jumps over the lazy dog\n";
}

inline lm::LmOptions tiny_lm_options(const std::filesystem::path& dir, int64_t batch_size) {
  write_tiny_corpus(dir);
  lm::LmOptions o;
  o.model.context = 16;
  o.model.dim = 16;
  o.model.layers = 1;
  o.model.heads = 2;
  o.steps = 6;
  o.batch_size = batch_size;
  o.warmup_steps = 0;
  o.eval_every = 0;
  o.log_every = 0;
  o.corpus = (dir / "corpus.txt").string();
  o.checkpoint_dir = (dir / "ckpt").string();
  return o;
}

// The same run (a checkpoint every 2 steps) as train_lm gets it: its options parsed from a
// command line, which they record (LmOptions::command_line, as lm_main sets it), so its
// checkpoints can rebuild it (lm::lm_trainer_factory_of). Writes no corpus (write_tiny_corpus).
inline lm::LmOptions tiny_train_lm_options(const std::filesystem::path& dir, int64_t batch_size) {
  std::vector<std::string> args = {"train_lm", "--context", "16", "--dim", "16", "--layers", "1",
                                   "--heads", "2", "--steps", "6", "--batch-size", std::to_string(batch_size),
                                   "--warmup-steps", "0", "--eval-every", "0", "--log-every", "0",
                                   "--corpus", (dir / "corpus.txt").string(), "--checkpoint-dir",
                                   (dir / "ckpt").string(), "--checkpoint-every", "2"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  lm::ParsedLmOptions parsed = lm::parse_lm_options(static_cast<int>(argv.size()), argv.data());
  if (!parsed.error.empty()) throw std::logic_error("tiny_train_lm_options: " + parsed.error);
  parsed.options.command_line.assign(args.begin() + 1, args.end());
  return parsed.options;
}

// Of a tiny run whose gradient flipped at step 3 (training::testing::gradient_flip), with
// checkpoints at steps 2, 4 and 6: each interval rebuilt from its checkpoint's recorded
// command line, the first found diverging at step 3, the second bit-identical.
inline void expect_flip_found_in_first_interval(const std::vector<std::pair<int64_t, std::string>>& ckpts) {
  const training::VerifyResult bad =
      lm::verify_lm_interval(ckpts[0].second, ckpts[1].second, lm::lm_trainer_factory_of(ckpts[0].second));
  EXPECT_FALSE(bad.identical);
  EXPECT_EQ(bad.first_diverging_step, 3) << bad.summary;
  EXPECT_FALSE(bad.first_diverging_tensor.empty()) << bad.summary;
  const training::VerifyResult next =
      lm::verify_lm_interval(ckpts[1].second, ckpts[2].second, lm::lm_trainer_factory_of(ckpts[1].second));
  EXPECT_TRUE(next.identical) << next.summary;
}

}  // namespace fjit::testing
