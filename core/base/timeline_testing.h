// Test seam of the timeline (core/base/timeline.h): pretends this process's clock is off by a
// known amount, so the clock alignment between ranks can be checked against it.
#pragma once

#include <cstdint>

namespace fjit::timeline::testing {

// From now on clock_ns() and every timestamp the timeline records read `skew_ns` later than
// now_ns() (recorded timestamps are shifted when written). Set it before the clocks are
// aligned (before the MPI mesh is made).
void set_clock_skew(int64_t skew_ns);

}  // namespace fjit::timeline::testing
