#include "parallel/clock_sync.h"

#include <sched.h>

#include <cstdint>
#include <limits>
#include <stdexcept>

namespace fjit {
namespace {

constexpr int kTagClock = 0x71c;

// Waits for `request`, yielding the CPU between polls: with ranks sharing a core, a rank that
// spins in MPI_Recv holds the core its peer needs to answer for a whole time slice, and the
// round trip (so the error bound) would be that slice.
void wait_yielding(MPI_Request* request) {
  int done = 0;
  for (MPI_Test(request, &done, MPI_STATUS_IGNORE); !done;
       MPI_Test(request, &done, MPI_STATUS_IGNORE))
    sched_yield();
}

void send(const int64_t* value, int peer, MPI_Comm comm) {
  MPI_Request request;
  MPI_Isend(value, 1, MPI_INT64_T, peer, kTagClock, comm, &request);
  wait_yielding(&request);
}

void receive(int64_t* value, int peer, MPI_Comm comm) {
  MPI_Request request;
  MPI_Irecv(value, 1, MPI_INT64_T, peer, kTagClock, comm, &request);
  wait_yielding(&request);
}

}  // namespace

timeline::ClockOffset estimate_clock_offset(MPI_Comm comm, int exchanges) {
  if (exchanges < 1) throw std::invalid_argument("estimate_clock_offset: exchanges must be >= 1");
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (rank == 0) {
    for (int peer = 1; peer < size; ++peer) {
      for (int k = 0; k < exchanges; ++k) {
        int64_t ping = 0;
        receive(&ping, peer, comm);
        const int64_t t0 = timeline::clock_ns();
        send(&t0, peer, comm);
      }
    }
    return {};
  }
  timeline::ClockOffset best;
  int64_t best_round_trip = std::numeric_limits<int64_t>::max();
  for (int k = 0; k < exchanges; ++k) {
    const int64_t t1 = timeline::clock_ns();
    int64_t t0 = 0;
    send(&t1, 0, comm);
    receive(&t0, 0, comm);
    const int64_t t4 = timeline::clock_ns();
    const int64_t round_trip = t4 - t1;
    if (round_trip >= best_round_trip) continue;
    best_round_trip = round_trip;
    best.offset_ns = t0 - t1 - round_trip / 2;
    best.error_ns = (round_trip + 1) / 2;
  }
  return best;
}

}  // namespace fjit
