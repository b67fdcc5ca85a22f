#include "parallel/clock_sync.h"

#include <cstdint>
#include <limits>
#include <stdexcept>

namespace fjit {
namespace {

constexpr int kTagClock = 0x71c;

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
        MPI_Recv(&ping, 1, MPI_INT64_T, peer, kTagClock, comm, MPI_STATUS_IGNORE);
        const int64_t t0 = timeline::clock_ns();
        MPI_Send(&t0, 1, MPI_INT64_T, peer, kTagClock, comm);
      }
    }
    return {};
  }
  timeline::ClockOffset best;
  int64_t best_round_trip = std::numeric_limits<int64_t>::max();
  for (int k = 0; k < exchanges; ++k) {
    const int64_t t1 = timeline::clock_ns();
    int64_t t0 = 0;
    MPI_Send(&t1, 1, MPI_INT64_T, 0, kTagClock, comm);
    MPI_Recv(&t0, 1, MPI_INT64_T, 0, kTagClock, comm, MPI_STATUS_IGNORE);
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
