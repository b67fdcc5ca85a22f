// The training options of the language-model programs on a CLI11 app, shared by train_lm
// (parallel/lm/lm_options.cc) and finetune_lm (parallel/lm/finetune_options.cc): everything
// of LmOptions but the model's shape (--layers, --dim, ...) and generation. Only sources of
// fjit_train include it (CLI11 is a private dependency).
#pragma once

#include <CLI/CLI.hpp>

#include "parallel/lm/lm_options.h"

namespace fjit::lm {

// --remat, --steps ... --export-hf, parsed strictly into `o` (defaults shown from `o`).
void add_training_options(CLI::App& app, LmOptions& o);

}  // namespace fjit::lm
