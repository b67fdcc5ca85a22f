// What a replica of this process is doing, as text for the reports of a stalled job
// (parallel/shm_communicator.cc, parallel/mpi_roll_call.cc). Reads the activity the executor
// and the communicators keep (core/base/activity.h): a racy snapshot of a moment.
#pragma once

#include <string>

namespace fjit {

// Lines (none ending in '\n') such as
//   in instruction 7 of 12: log f32[8,3] <- f32[8,3], at tests/x.cc:40 in step_fn(...)
//   user stack:
//     at step_fn (tests/x.cc:40)
//   waiting in all_reduce #3 (axis 'batch', 4 bytes) for the other replicas
// (a collective instruction adds "(axis 'batch')" to its line).
// Nested plans (loop and branch bodies) add one "inside" line per level. "not running a plan"
// when it is between steps; "" for a replica that is not tracked.
std::string describe_replica_activity(int replica);

}  // namespace fjit
