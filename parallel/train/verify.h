// Certified runs: re-executing a checkpoint interval to confirm that it was computed correctly
// (issue 30, item 5). fjit's steps are bit-exact and deterministic, so a run resumed from the
// checkpoint at step s must reach, at step s + K, exactly the state of the checkpoint at
// s + K; a silent data corruption on any replica in between (a flipped bit in a gradient)
// shows as a difference. examples/fjit_verify.cc runs it over a checkpoint directory.
//
// Promises:
//  - Both files must pass the whole-file checksum and their hash chains (io/state_hash.h), and
//    `to` must be the link right after `from` (its chain_prev is from's chain value);
//    otherwise std::runtime_error names the file and what failed.
//  - The first diverging step is the first whose loss or gradient norm (bits, from the step
//    records of `to`) differs from the re-execution's; the first diverging tensor is the first
//    of `to`'s tensors, in its order, that differs bitwise from the re-executed state (with the
//    element index). Identical means every step record and every tensor bit agree.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/train/trainer.h"

namespace fjit::training {

struct VerifyResult {
  std::string from, to;
  int64_t from_step = 0, to_step = 0;
  bool identical = false;
  int64_t first_diverging_step = -1;   // -1: every step record agrees
  std::string first_diverging_tensor;  // empty: every tensor agrees
  int64_t first_diverging_element = -1;
  std::string summary;                 // one line saying all of it
};

// Builds a fresh trainer for the run being verified (same options, data and replica count;
// no checkpoint_dir, no resume).
using TrainerFactory = std::function<std::unique_ptr<Trainer>()>;

// Re-executes from checkpoint `from` to checkpoint `to` with a trainer from `make`.
VerifyResult verify_interval(const std::string& from, const std::string& to, const TrainerFactory& make);

// What re-executing an interval needs of a trainer, for trainers other than Trainer (the
// language model's, parallel/lm/lm_verify.h): each call acts on one trainer, built fresh.
struct Replay {
  std::function<void(const std::string&)> load;     // resume from a checkpoint
  std::function<int64_t()> steps_done;
  std::function<bool()> step;                       // one step; false once the run is over
  std::function<std::string()> last_record;         // step_record of the step just run
  std::function<io::NamedArrays()> state;           // the tensors a checkpoint would hold
};
VerifyResult verify_interval(const std::string& from, const std::string& to, const Replay& replay);

// The periodic checkpoints of `dir` (io::checkpoint_path's names), by step.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);

}  // namespace fjit::training
