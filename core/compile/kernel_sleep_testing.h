// Test seam of the executor (core/compile/executable.cc): not part of fjit's API, for tests of
// stall reports and step deadlines only. A replica made to sleep inside one instruction stands for a long kernel:
// its activity (core/base/activity.h) names that instruction meanwhile, and it calls
// activity_poll() every few milliseconds, as a long kernel that polls does.
#pragma once

#include "core/ir/op.h"

namespace fjit::testing {

// The next time replica `replica` runs an instruction computing `op` (in any plan), it sleeps
// `seconds` first, once. Thread-safe; a later call replaces an armed one.
void sleep_in_kernel(int replica, Op op, double seconds);

// The next time replica `replica` runs an instruction computing `op` (in any plan) in a step
// with a deadline, it first waits until the deadline has passed (at most `seconds`), once,
// without marking the step stopped: the kernel then starts past the deadline, and one that
// polls it (core/base/step_deadline.h) stops at its first ask. Thread-safe; replaces an armed
// sleep_in_kernel.
void start_past_deadline(int replica, Op op, double seconds = 10.0);

}  // namespace fjit::testing
