// MpiCommunicator's collectives of sharding (mpi_communicator.h): reduce_scatter, all_to_all
// and permute as nonblocking point-to-point rounds, waited on under the stall policy like
// every other collective of the communicator.
#include <algorithm>
#include <cstring>
#include <vector>

#include "parallel/collective_metrics.h"
#include "parallel/communicator_reduce.h"
#include "parallel/mpi_communicator.h"

namespace fjit {
namespace {

// Tags of their own (mpi_communicator.cc uses 1 to 4), so that these rounds never match
// another collective's messages.
enum Tag : int { kTagReduceScatter = 5, kTagAllToAll = 6, kTagPermute = 7 };
// MPI counts are ints: messages go in pieces of at most this many bytes.
constexpr size_t kPieceBytes = size_t{1} << 30;

}  // namespace

void MpiCommunicator::exchange_blocks(const unsigned char* in, unsigned char* out, size_t block, int tag) {
  for (size_t done = 0; done < block; done += kPieceBytes) {
    const int n = static_cast<int>(std::min(kPieceBytes, block - done));
    MPI_Request* req = requests_.data();
    int n_req = 0;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Irecv(out + r * block + done, n, MPI_BYTE, r, tag, comm_, &req[n_req++]);
      MPI_Isend(in + r * block + done, n, MPI_BYTE, r, tag, comm_, &req[n_req++]);
    }
    wait(n_req, req);
  }
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) {
  const size_t esize = static_cast<size_t>(dtype_size(dtype));
  const size_t block = count > 0 ? static_cast<size_t>(count) * esize : 0;
  CollectiveRecord record(true, CollectiveKind::other, static_cast<int64_t>(block));
  enter("reduce_scatter", block);
  if (block == 0) return;
  const auto* in = static_cast<const unsigned char*>(send);
  // Every rank's copy of this rank's block, then one rank-order combine (all_reduce's bits).
  unsigned char* received = scratch(block * static_cast<size_t>(size_));
  exchange_blocks(in, received, block, kTagReduceScatter);
  for (int r = 0; r < size_; ++r) inputs_[r] = r == rank_ ? in + rank_ * block : received + r * block;
  void* out[1] = {recv};
  combine_in_rank_order(inputs_.data(), size_, out, 1, 0, count, dtype, op);
}

void MpiCommunicator::all_to_all(const void* send, void* recv, size_t nbytes_per_rank) {
  CollectiveRecord record(true, CollectiveKind::other, static_cast<int64_t>(nbytes_per_rank));
  enter("all_to_all", nbytes_per_rank);
  const size_t block = nbytes_per_rank;
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  if (block > 0) std::memmove(out + rank_ * block, in + rank_ * block, block);
  exchange_blocks(in, out, block, kTagAllToAll);
}

void MpiCommunicator::permute(const void* send, void* recv, size_t nbytes, int send_to, int recv_from) {
  CollectiveRecord record(true, CollectiveKind::other, static_cast<int64_t>(nbytes));
  enter("ppermute", nbytes);
  if (nbytes == 0) return;
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  if (recv_from < 0) std::memset(out, 0, nbytes);
  if (recv_from == rank_) std::memmove(out, in, nbytes);
  for (size_t done = 0; done < nbytes; done += kPieceBytes) {
    const int n = static_cast<int>(std::min(kPieceBytes, nbytes - done));
    MPI_Request* req = requests_.data();
    int n_req = 0;
    if (recv_from >= 0 && recv_from != rank_)
      MPI_Irecv(out + done, n, MPI_BYTE, recv_from, kTagPermute, comm_, &req[n_req++]);
    if (send_to >= 0 && send_to != rank_)
      MPI_Isend(in + done, n, MPI_BYTE, send_to, kTagPermute, comm_, &req[n_req++]);
    if (n_req > 0) wait(n_req, req);
  }
}

}  // namespace fjit
