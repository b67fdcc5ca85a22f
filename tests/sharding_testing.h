// Checks of the Communicator's collectives of sharding that the thread and MPI tests share
// (tests/sharding_collectives_test.cc, tests/mpi/sharding_mpi_test.cc). Each runs on one
// replica of a group and checks that replica's result: reduce_scatter against the same
// group's all_reduce (bit for bit) and against the rank-order sum, the others against closed
// forms. Test-only, header-only.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/kernels/collective/communicator.h"
#include "tests/communicator_testing.h"

namespace fjit::testing {

// Sizes per replica: one element, odd sizes, and blocks past the MPI eager and segment limits.
constexpr int64_t kShardCounts[] = {1, 7, 1001, 70001};

template <class T>
void check_reduce_scatter_bits(Communicator& c, int64_t count) {
  const int n = c.size(), me = c.rank();
  const DType dtype = dtype_of<T>::value;
  std::vector<T> send(static_cast<size_t>(count * n)), mine(static_cast<size_t>(count));
  for (int64_t i = 0; i < count * n; ++i) send[i] = order_sensitive<T>(me, i);
  std::vector<T> full = send;
  c.all_reduce(full.data(), count * n, dtype, ReduceOp::sum);
  c.reduce_scatter(send.data(), mine.data(), count, dtype, ReduceOp::sum);
  EXPECT_EQ(std::memcmp(mine.data(), full.data() + me * count, count * sizeof(T)), 0)
      << dtype_name(dtype) << " count " << count << " rank " << me << ": not all_reduce's slice";
  int64_t wrong = 0;
  for (int64_t i = 0; i < count; ++i) {
    const T want = rank_order_sum<T>(n, me * count + i);
    wrong += std::memcmp(&mine[i], &want, sizeof(T)) != 0;
  }
  EXPECT_EQ(wrong, 0) << dtype_name(dtype) << " count " << count << " rank " << me << ": not the rank-order sum";
}

inline uint8_t pattern(int from, int to, size_t j) { return static_cast<uint8_t>(from * 31 + to * 7 + j); }

inline void check_all_to_all(Communicator& c, size_t block) {
  const int n = c.size(), me = c.rank();
  std::vector<uint8_t> send(block * n), recv(block * n, 0xEE), want(block * n);
  for (int r = 0; r < n; ++r)
    for (size_t j = 0; j < block; ++j) {
      send[r * block + j] = pattern(me, r, j);
      want[r * block + j] = pattern(r, me, j);
    }
  c.all_to_all(send.data(), recv.data(), block);
  EXPECT_TRUE(recv == want) << block << " bytes per block, rank " << me;
}

// A ring (r -> r+1), then one pair (0 -> 1) where every other replica receives zeros.
inline void check_permute(Communicator& c, size_t nbytes) {
  const int n = c.size(), me = c.rank();
  std::vector<uint8_t> send(nbytes), recv(nbytes, 0xEE), want(nbytes);
  for (size_t j = 0; j < nbytes; ++j) send[j] = pattern(me, 0, j);
  const int from = (me + n - 1) % n;
  for (size_t j = 0; j < nbytes; ++j) want[j] = pattern(from, 0, j);
  c.permute(send.data(), recv.data(), nbytes, (me + 1) % n, from);
  EXPECT_TRUE(recv == want) << "ring, " << nbytes << " bytes, rank " << me;
  std::fill(recv.begin(), recv.end(), 0xEE);
  c.permute(send.data(), recv.data(), nbytes, me == 0 ? 1 : -1, me == 1 ? 0 : -1);
  for (size_t j = 0; j < nbytes; ++j) want[j] = me == 1 ? pattern(0, 0, j) : 0;
  EXPECT_TRUE(recv == want) << "one pair, " << nbytes << " bytes, rank " << me;
}

// Replica r contributes 5 * r + 3 bytes (replica 0 none when `empty_first`).
inline void check_all_gather_uneven(Communicator& c, bool empty_first) {
  const int n = c.size(), me = c.rank();
  std::vector<int64_t> bytes(n);
  for (int r = 0; r < n; ++r) bytes[r] = r == 0 && empty_first ? 0 : 5 * r + 3;
  std::vector<uint8_t> send(static_cast<size_t>(bytes[me])), want;
  for (size_t j = 0; j < send.size(); ++j) send[j] = pattern(me, 1, j);
  for (int r = 0; r < n; ++r)
    for (int64_t j = 0; j < bytes[r]; ++j) want.push_back(pattern(r, 1, static_cast<size_t>(j)));
  std::vector<uint8_t> recv(want.size(), 0xEE);
  c.all_gather_uneven(send.data(), recv.data(), bytes.data());
  EXPECT_TRUE(recv == want) << "rank " << me;
}

inline void check_sharding_collectives(Communicator& c) {
  for (int64_t count : kShardCounts) {
    check_reduce_scatter_bits<float>(c, count);
    check_reduce_scatter_bits<double>(c, count);
  }
  for (size_t block : {size_t{0}, size_t{13}, size_t{1} << 20}) {
    check_all_to_all(c, block);
    check_permute(c, block);
  }
  check_all_gather_uneven(c, false);
  check_all_gather_uneven(c, true);
}

}  // namespace fjit::testing
