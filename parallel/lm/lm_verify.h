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
//  - lm_trainer_factory_of rebuilds a train_lm run from its checkpoint alone (below).
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

// The run that wrote `checkpoint` (an LmTrainer checkpoint, kLmCheckpointFormat), rebuilt from
// what it recorded, for verify_lm_interval (and fjit_verify): its command line parsed as
// train_lm parses it, with no checkpoint_dir, resume, export, logging or evaluation, no step
// limit (so any of its checkpoints can be reached), and thread replicas as many as it recorded
// (bit-identical to MPI ranks). The token file is the recorded --token-file, else
// corpus.tokens next to the checkpoint when it is there (where the run wrote it), else the
// corpus tokenized again.
// Throws std::runtime_error naming the file when it is not an LmTrainer checkpoint, records no
// command line (a run not started by train_lm: finetune_lm's, or a program's own), or its
// command line no longer parses.
LmTrainerFactory lm_trainer_factory_of(const std::string& checkpoint);

}  // namespace fjit::lm
