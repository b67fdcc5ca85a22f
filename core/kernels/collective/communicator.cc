#include "core/kernels/collective/communicator.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace fjit {

void Communicator::all_reduce_apply(const void* src, void* scratch, int64_t count, DType dtype,
                                    void* ctx, ReducedBlockFn apply) {
  if (count <= 0) return;
  if (scratch != src) std::memcpy(scratch, src, count * dtype_size(dtype));
  all_reduce(scratch, count, dtype, ReduceOp::sum);
  apply(ctx, 0, count, scratch);
}

void Communicator::reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) {
  const int64_t esize = dtype_size(dtype);
  std::vector<unsigned char> all(static_cast<size_t>(count * size() * esize));
  if (!all.empty()) std::memcpy(all.data(), send, all.size());
  all_reduce(all.data(), count * size(), dtype, op);
  if (count > 0) std::memcpy(recv, all.data() + rank() * count * esize, static_cast<size_t>(count * esize));
}

void Communicator::all_to_all(const void* send, void* recv, size_t nbytes_per_rank) {
  // Every replica gathers every block and keeps those addressed to it.
  const size_t n = static_cast<size_t>(size()), block = nbytes_per_rank;
  std::vector<unsigned char> all(n * n * block);
  all_gather(send, all.data(), n * block);
  for (size_t r = 0; r < n && block > 0; ++r)
    std::memcpy(static_cast<unsigned char*>(recv) + r * block, all.data() + (r * n + rank()) * block, block);
}

void Communicator::permute(const void* send, void* recv, size_t nbytes, int send_to, int recv_from) {
  (void)send_to;
  std::vector<unsigned char> all(static_cast<size_t>(size()) * nbytes);
  all_gather(send, all.data(), nbytes);
  if (nbytes == 0) return;
  if (recv_from < 0) std::memset(recv, 0, nbytes);
  else std::memcpy(recv, all.data() + static_cast<size_t>(recv_from) * nbytes, nbytes);
}

void Communicator::all_gather_uneven(const void* send, void* recv, const int64_t* bytes_per_rank) {
  // Blocks padded to the largest, gathered, then packed.
  const int n = size();
  const int64_t most = *std::max_element(bytes_per_rank, bytes_per_rank + n);
  std::vector<unsigned char> mine(static_cast<size_t>(most), 0), all(static_cast<size_t>(most) * n);
  if (bytes_per_rank[rank()] > 0) std::memcpy(mine.data(), send, static_cast<size_t>(bytes_per_rank[rank()]));
  all_gather(mine.data(), all.data(), static_cast<size_t>(most));
  auto* out = static_cast<unsigned char*>(recv);
  for (int r = 0; r < n; ++r) {
    if (bytes_per_rank[r] > 0) std::memcpy(out, all.data() + static_cast<size_t>(r) * most, static_cast<size_t>(bytes_per_rank[r]));
    out += bytes_per_rank[r];
  }
}

}  // namespace fjit
