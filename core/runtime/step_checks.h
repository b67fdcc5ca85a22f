// The host-side hook that runs after every step of a plan with check sites, and the error it
// throws. Core declares it because JitCore::run calls it; the checks layer implements it
// (step_check_handler.h in the checks layer: combine the flag vectors of all replicas, report every raised
// check with its stack trace, apply the policy) and installs it. Including that header, or
// the umbrella fjit.h, installs it before main() runs.
//
// Step numbers are 0-based and count steps of one function: the first call of a jit function
// (or the first step of a pmap, however many replicas run it) is step 0. The report's
// "at step N" and CheckError::step() give that number; under pmap it is the same on every
// replica and every rank.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "core/compile/executable.h"

namespace fjit {

class Communicator;

// Thrown (on every replica at once) when a step raised checks under the throw policy.
// what() holds the whole report; step() is the failing step's 0-based number.
class CheckError : public std::runtime_error {
 public:
  CheckError(const std::string& report, int64_t step) : std::runtime_error(report), step_(step) {}
  int64_t step() const { return step_; }

 private:
  int64_t step_;
};

struct StepChecks {
  const Executable* exe = nullptr;
  uint32_t* flags = nullptr;   // num_check_sites() words, this replica's
  double* payload = nullptr;   // kCheckPayloadSlots per site
  Communicator* comm = nullptr;
  int replica = 0;
  int64_t step = 0;            // 0-based, the same on every replica of `comm`
  CheckPolicy policy = CheckPolicy::throw_error;
  const char* function = "fn";
  // What a replay bundle records (checks/replay_bundle.h): this replica's input leaves in the
  // plan's parameter order, intact when the handler runs (no donation while bundles are
  // written), their paths ("arg0.w1", "arg2"), and how the step was traced.
  std::span<const Array* const> inputs;
  std::span<const std::string> input_paths;
  // This replica's outputs as the step computed them (before a skip restores any): a
  // multi-replica replay compares its replicas' outputs with them.
  std::span<const Array> outputs;
  CheckMode mode = CheckMode::user;
  std::span<const std::string> axis_names;
  int num_replicas = 1;
  // The size of each of axis_names on a mesh with named axes (shard_map); empty: each axis
  // spans num_replicas (pmap).
  std::span<const int> axis_sizes;
  // Out: the handler sets bit k when a check of CheckKind k raised on any replica (the same
  // bits on every replica of `comm`). Null: not wanted.
  uint64_t* raised_kinds = nullptr;
};

// Returns true when the step's outputs must be discarded (skip_step policy and a check raised
// on any replica); throws CheckError under throw_error. Called by every replica of a
// communicator after every step of a plan with check sites, whether or not it raised anything.
using StepCheckHandler = bool (*)(const StepChecks& s);

// Installs the handler (process-wide; the last call wins). Thread-safe.
void set_step_check_handler(StepCheckHandler handler);
// The installed handler. REQUIRES: one is installed; otherwise throws std::logic_error that
// says which library to link (a plan with checks must never run with its flags unread).
StepCheckHandler step_check_handler();

// Replay bundles of raising steps (written by the checks layer, checks/replay_bundle.h).
// `dir` empty: off. Process-wide; initialised from FJIT_CHECK_DUMP_DIR and
// FJIT_CHECK_DUMP_MAX (an integer from 1 to 2^30, default 8; anything else throws
// std::invalid_argument naming it when first read).
struct CheckDumpOptions {
  std::string dir;
  int max_bundles = 8;  // bundles kept per directory: later raising steps write none
};
CheckDumpOptions check_dump_options();
void set_check_dump_options(CheckDumpOptions options);
// Cheap (one atomic load once initialised): whether bundles are being written. JitCore::run
// reads it to keep a step's inputs intact (no donation) while it is true.
bool check_dump_enabled();

}  // namespace fjit
