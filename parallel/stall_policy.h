// StallPolicy: how long a backend's collective waits for the other replicas before it warns,
// and before it ends the job. Every Communicator implementation in parallel/ honours one.
#pragma once

#include <chrono>

namespace fjit {

// How long a collective may wait for the other replicas. After `warn_after` the replicas that
// have not arrived are logged; after `abort_after` the whole job is aborted with that message
// (threads: std::abort after logging; MPI: MPI_Abort). Zero disables the respective limit.
struct StallPolicy {
  std::chrono::milliseconds warn_after{std::chrono::seconds(30)};
  std::chrono::milliseconds abort_after{std::chrono::seconds(300)};
  // Reads FJIT_STALL_WARN_S and FJIT_STALL_ABORT_S (seconds, may be fractional; a malformed
  // one logs a warning and keeps the default; core/base/config.def).
  static StallPolicy from_environment();
};

}  // namespace fjit
