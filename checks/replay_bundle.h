// Replay bundles: what a raising step leaves behind so that fjit::replay (checks/replay.h) can
// run it again, alone, with every automatic check on.
//
// With a dump directory set (FJIT_CHECK_DUMP_DIR, or set_check_dump_options in
// core/runtime/step_checks.h), a step in which a check raised on any replica, under any
// policy, makes every replica (thread or rank) write its part, one directory
// <dir>/step<N>_replica<R>/ holding
//   inputs.safetensors  the step's input leaves (batch shard, parameters, optimizer state,
//                       pmap's replica weight) under their paths ("arg0.w1", "arg2"), in the
//                       plan's parameter order (core/io/checkpoint.h's format)
//   outputs.safetensors the replica's outputs as the step computed them ("out0", "out1", ...)
//   meta.json           {"format": "fjit-replay-1", "function", "step", "replica",
//                        "num_replicas", "raised" (a check raised on this replica),
//                        "axis_names", "axis_sizes" (only on a mesh with named axes,
//                        shard_map: each axis's size, their product num_replicas), "check_mode",
//                        "fingerprint" (16 hex digits), "inputs": [{"path", "dtype", "shape"}, ...]}
//   report.txt          the check report of that step, as logged
// The parts of one step together are what fjit::replay re-executes as the whole step.
//
// Promises:
//  - No half parts: the files are written into a hidden temporary directory next to the
//    part and renamed into place at once; a failure removes it. A part that exists is
//    never overwritten.
//  - Bounded: parts of at most CheckDumpOptions::max_bundles steps per directory (the first
//    ones; a later raising step writes none and logs one line saying so). A step whose first
//    part was written gets all its parts. Several processes writing one directory at once
//    may pass the bound by at most one step each.
//  - Never fails the step: an error while writing is logged as a warning naming the path,
//    and the check policy applies as without dumping.
//  - Cost: with dumping off nothing is done. With it on, a step that raises nothing costs
//    nothing more; jit functions with donate_argnums under the log policy write fresh
//    outputs instead of updating their inputs in place (so that a raising step's inputs
//    survive it); a raising step writes its inputs and outputs to disk on every replica.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/runtime/step_checks.h"

namespace fjit {

// A bundle as read back.
struct ReplayBundle {
  std::string dir;
  std::string function;
  int64_t step = 0;
  int replica = 0;
  int num_replicas = 1;
  bool raised = true;      // a check raised on this replica
  std::vector<std::string> axis_names;
  std::vector<int> axis_sizes;  // empty: every axis spans num_replicas (pmap)
  CheckMode mode = CheckMode::user;
  uint64_t fingerprint = 0;
  io::NamedArrays inputs;   // leaf path -> value, in the plan's parameter order
  io::NamedArrays outputs;  // "out<k>" -> the step's output k on this replica (may be empty)
  std::string report;
};

// What a traced plan is: a hash of its optimized graph (every node's op, dtype, shape,
// inputs and attributes, constants by value), its input and output types and its check
// sites' kinds and messages. Stable across processes and runs of one build; it changes when
// the function, the shapes or the check mode change.
uint64_t plan_fingerprint(const Executable& exe);

// Writes this replica's part for the raising step `s` (see above); `raised`: a check raised
// on this replica. Returns the part's path, or "" when none was written (dumping off, the
// bound reached, or an error, logged).
std::string write_replay_bundle(const StepChecks& s, const std::string& report, bool raised = true);

// The path of replica `replica`'s part of the step of the part at `dir` (a sibling directory).
std::string replay_part_path(const std::string& dir, int64_t step, int replica);

// Reads and validates a bundle. Throws std::runtime_error "<file>: <problem>" naming the
// file at fault (a missing or malformed meta.json, axis sizes that do not multiply to
// num_replicas, inputs.safetensors that is corrupt or disagrees with meta.json's list of inputs).
ReplayBundle load_replay_bundle(const std::string& dir);

}  // namespace fjit
