// Replay bundles: what a raising step leaves behind so that fjit::replay (checks/replay.h) can
// run it again, alone, with every automatic check on.
//
// With a dump directory set (FJIT_CHECK_DUMP_DIR, or set_check_dump_options in
// core/runtime/step_checks.h), every replica on which a check raised, under any policy,
// writes one directory <dir>/step<N>_replica<R>/ holding
//   inputs.safetensors  the step's input leaves (batch shard, parameters, optimizer state,
//                       pmap's replica weight) under their paths ("arg0.w1", "arg2"), in the
//                       plan's parameter order (core/io/checkpoint.h's format)
//   meta.json           {"format": "fjit-replay-1", "function", "step", "replica",
//                        "num_replicas", "axis_names", "check_mode", "fingerprint" (16 hex
//                        digits), "inputs": [{"path", "dtype", "shape"}, ...]}
//   report.txt          the check report of that step, as logged
//
// Promises:
//  - No half bundles: the files are written into a hidden temporary directory next to the
//    bundle and renamed into place at once; a failure removes it. A bundle that exists is
//    never overwritten.
//  - Bounded: at most CheckDumpOptions::max_bundles bundles per directory (the first ones;
//    later raising steps log one line saying none was written). Several processes writing
//    one directory at once may pass the bound by at most one bundle each.
//  - Never fails the step: an error while writing is logged as a warning naming the path,
//    and the check policy applies as without dumping.
//  - Cost: with dumping off nothing is done. With it on, a step that raises nothing costs
//    nothing more; jit functions with donate_argnums under the log policy write fresh
//    outputs instead of updating their inputs in place (so that a raising step's inputs
//    survive it); a raising step writes its inputs to disk, on the raising replicas only.
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
  std::vector<std::string> axis_names;
  CheckMode mode = CheckMode::user;
  uint64_t fingerprint = 0;
  io::NamedArrays inputs;  // leaf path -> value, in the plan's parameter order
  std::string report;
};

// What a traced plan is: a hash of its optimized graph (every node's op, dtype, shape,
// inputs and attributes, constants by value), its input and output types and its check
// sites' kinds and messages. Stable across processes and runs of one build; it changes when
// the function, the shapes or the check mode change.
uint64_t plan_fingerprint(const Executable& exe);

// Writes this replica's bundle for the raising step `s` (see above). Returns the bundle's
// path, or "" when none was written (dumping off, the bound reached, or an error, logged).
std::string write_replay_bundle(const StepChecks& s, const std::string& report);

// Reads and validates a bundle. Throws std::runtime_error "<file>: <problem>" naming the
// file at fault (a missing or malformed meta.json, inputs.safetensors that is corrupt or
// disagrees with meta.json's list of inputs).
ReplayBundle load_replay_bundle(const std::string& dir);

}  // namespace fjit
