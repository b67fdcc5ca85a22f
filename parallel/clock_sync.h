// Aligning the clocks of a job's ranks (the timeline's time base, core/base/timeline.h): each
// rank's offset against rank 0, estimated NTP-style over a few ping-pongs.
#pragma once

#include <mpi.h>

#include "core/base/timeline.h"

namespace fjit {

inline constexpr int kClockExchanges = 16;

// Collective over `comm`. Rank 0 answers `exchanges` pings from each other rank in turn with
// its clock reading; each other rank keeps the exchange with the shortest round trip. With t1
// and t4 the rank's own readings when it sent and when it got the answer and t0 rank 0's
// reading in between, the true offset lies in [t0 - t4, t0 - t1] whatever the two messages'
// delays: the estimate is the middle, the error bound half the round trip (rounded up). Rank 0
// gets {0, 0}. Reads timeline::clock_ns() (so the timeline's test skew is seen).
// REQUIRES: exchanges >= 1; no other message with this file's tag in flight on `comm`.
timeline::ClockOffset estimate_clock_offset(MPI_Comm comm, int exchanges = kClockExchanges);

}  // namespace fjit
