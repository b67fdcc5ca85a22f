// Certified language-model runs: re-executing an interval between two checkpoints of an
// LmTrainer run (issue 30, item 5), as parallel/train/verify.h does for the classifier trainer.
//
// Promises:
//  - Both files must pass the whole-file checksum and their hash chains, and `to` must be the
//    link right after `from`; otherwise std::runtime_error names the file and what failed.
//  - The trainer from `make` (the run's options and replica count, no checkpoint_dir, no
//    resume; built only once both files passed) is loaded from `from` and stepped to `to`'s
//    step. The result names the first step whose loss or gradient norm bits differ from
//    `to`'s step records, and the first of `to`'s tensors (trained parameters and AdamW
//    state) that differs bitwise from the re-executed state; identical when neither does.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "parallel/lm/lm_trainer.h"
#include "parallel/train/verify.h"

namespace fjit::lm {

using LmTrainerFactory = std::function<std::unique_ptr<LmTrainer>()>;

training::VerifyResult verify_lm_interval(const std::string& from, const std::string& to,
                                          const LmTrainerFactory& make);

}  // namespace fjit::lm
