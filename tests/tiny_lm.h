// A language-model run small enough for a unit test: a one-layer decoder 16 wide with a
// context of 16, six steps, over a generated 200-line corpus written into `dir` (which must
// exist), checkpoints going to dir/ckpt.
#pragma once

#include <filesystem>
#include <fstream>

#include "parallel/lm/lm_options.h"

namespace fjit::testing {

inline lm::LmOptions tiny_lm_options(const std::filesystem::path& dir, int64_t batch_size) {
  {
    std::ofstream corpus(dir / "corpus.txt");
    for (int i = 0; i < 200; ++i) corpus << "the quick brown fox " << i << " jumps over the lazy dog\n";
  }
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

}  // namespace fjit::testing
