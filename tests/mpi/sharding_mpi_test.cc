// The collectives of sharding across MPI ranks (run with 2 and 3 ranks): the communicator's
// reduce_scatter (bit for bit the all-reduce's slice), all_to_all, permute and uneven
// all_gather, its all_reduce with and without the shared-memory window; the traced psum_scatter against
// psum's slice; all_gather over ranks holding shards of different sizes; and the same
// results as thread replicas.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <vector>

#include "fjit.h"
#include "parallel/mpi_communicator.h"
#include "parallel/pmap.h"
#include "parallel/shm_communicator.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/sharding_testing.h"

namespace fjit {
namespace {

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

// reduce_scatter is compared with all_reduce through the shared-memory window (when the
// ranks share one) and through messages.
TEST(ShardingMpi, CommunicatorCollectives) {
  auto& c = dynamic_cast<MpiCommunicator&>(mesh().comm(0));
  testing::check_sharding_collectives(c);
  c.set_shared_memory(false);
  testing::check_sharding_collectives(c);
  c.set_shared_memory(true);
}

// psum_scatter against psum on this rank's shard of order-sensitive data; every rank checks
// its own block, and the stacked blocks equal what thread replicas compute.
template <class T>
void check_psum_scatter(int64_t cols) {
  const int n = mesh().size(), me = mesh().first_replica();
  auto f = pmap(mesh(), "r", [](const Tensor& x) {
    return std::tuple{psum_scatter(x, "r", 1, true), psum(x, "r"), all_gather(psum_scatter(x, "r", 1, true), "r", 0, false)};
  });
  auto shard_of = [&](int r) {
    std::vector<T> v(static_cast<size_t>(2 * n * cols));
    for (size_t i = 0; i < v.size(); ++i) v[i] = testing::order_sensitive<T>(r, static_cast<int64_t>(i));
    return Array::from_vector<T>(v, {2, n * cols});
  };
  auto [mine, total, stacked] = f(shard_of(me));
  ASSERT_EQ(mine.shape(), (Shape{2, cols}));
  for (int64_t i = 0; i < 2; ++i)
    EXPECT_EQ(std::memcmp(mine.template data<T>() + i * cols, total.template data<T>() + i * n * cols + me * cols, cols * sizeof(T)), 0)
        << "row " << i << " cols " << cols;
  // Thread replicas on this rank, fed every rank's shard, compute the same bits.
  Mesh threads = Mesh::threads(n);
  auto g = pmap(threads, "r", [](const Tensor& x) { return all_gather(psum_scatter(x, "r", 1, true), "r", 0, false); });
  std::vector<T> all;
  for (int r = 0; r < n; ++r) {
    Array s = shard_of(r);
    all.insert(all.end(), s.data<T>(), s.data<T>() + s.size());
  }
  Array ref = g(Array::from_vector<T>(all, {2 * n, n * cols}));
  EXPECT_TRUE(ref.bit_equal(stacked)) << "cols " << cols;
}

TEST(ShardingMpi, PsumScatterIsPsumsSliceAndTheThreadsBits) {
  for (int64_t cols : {1, 7, 3001}) {
    check_psum_scatter<float>(cols);
    check_psum_scatter<double>(cols);
  }
}

TEST(ShardingMpi, AllToAllAndPpermute) {
  const int n = mesh().size(), me = mesh().first_replica();
  std::vector<std::pair<int, int>> ring;
  for (int r = 0; r < n; ++r) ring.emplace_back(r, (r + 1) % n);
  auto f = pmap(mesh(), "r", [&](const Tensor& x) { return std::tuple{all_to_all(x, "r", 0, 1, true), ppermute(x, "r", ring)}; });
  auto value = [](int r, int64_t i) { return static_cast<double>(r * 1000 + i); };
  std::vector<double> v(static_cast<size_t>(n * 3));
  for (int64_t i = 0; i < n * 3; ++i) v[i] = value(me, i);
  auto [t, p] = f(Array::from_vector<double>(v, {n, 3}));
  ASSERT_EQ(t.shape(), (Shape{1, 3 * n}));
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(t.data<double>()[j * 3 + k], value(j, me * 3 + k));  // x_j[me, k]
  for (int64_t i = 0; i < n * 3; ++i) EXPECT_EQ(p.data<double>()[i], value((me + n - 1) % n, i));
}

// Rank r holds r + 1 rows (uneven, as after join or a rank's own data): all_gather returns
// every rank's real rows, and its gradient goes back to each rank's own rows.
TEST(ShardingMpi, AllGatherOfUnevenShards) {
  const int n = mesh().size(), me = mesh().first_replica();
  auto f = pmap(mesh(), "b", [](const Tensor& x) {
    Tensor g = all_gather(x, "b");
    auto loss = [](const Tensor& x) { return sum(all_gather(x, "b") * all_gather(x, "b")); };
    return std::tuple{g, grad(loss)(x)};
  });
  std::vector<double> mine;
  for (int i = 0; i < (me + 1) * 2; ++i) mine.push_back(me * 100 + i);
  auto [g, dx] = f(Array::from_vector<double>(mine, {me + 1, 2}));
  std::vector<double> want;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < (r + 1) * 2; ++i) want.push_back(r * 100 + i);
  ASSERT_EQ(g.shape(), (Shape{static_cast<int64_t>(want.size() / 2), 2}));
  EXPECT_EQ(g.to_vector<double>(), want);
  // d/dx of sum over ranks' losses (each rank's loss is sum(G^2), G the same everywhere):
  // every rank's x appears in n losses, so dx = 2 n x.
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(dx.data<double>()[i], 2.0 * n * mine[i]);
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fjit::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::mesh().first_replica() == 0);
}
