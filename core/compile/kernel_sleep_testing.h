// Test seam of the executor (core/compile/executable.cc): not part of fjit's API, for tests of
// stall reports only. A replica made to sleep inside one instruction stands for a long kernel:
// its activity (core/base/activity.h) names that instruction meanwhile, and it calls
// activity_poll() every few milliseconds, as a long kernel that polls does.
#pragma once

#include "core/ir/op.h"

namespace fjit::testing {

// The next time replica `replica` runs an instruction computing `op` (in any plan), it sleeps
// `seconds` first, once. Thread-safe; a later call replaces an armed one.
void sleep_in_kernel(int replica, Op op, double seconds);

}  // namespace fjit::testing
