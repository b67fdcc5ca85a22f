// The collectives of sharding over thread replicas (2 and 3): the communicator's
// reduce_scatter, all_to_all, permute and uneven all_gather (tests/sharding_testing.h), then
// the traced psum_scatter, all_gather along any axis, all_to_all and ppermute against host
// loops (psum_scatter bit for bit against psum's slice), their bucketed dict forms against
// the single-tensor calls, all_gather over pmap's uneven split, and the errors.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fjit.h"
#include "parallel/pmap.h"
#include "parallel/shm_communicator.h"
#include "tests/sharding_testing.h"

namespace fjit {
namespace {

using testing::order_sensitive;

class Sharding : public ::testing::TestWithParam<int> {};

TEST_P(Sharding, CommunicatorCollectives) {
  ShmGroup group(GetParam(), StallPolicy{});
  group.run([](Communicator& c) { testing::check_sharding_collectives(c); });
}

// A global array whose replica-r block holds order-sensitive values of replica r, so that
// any other order of addition changes bits.
template <class T>
Array blocks(int n, Shape per_replica) {
  const int64_t each = num_elements(per_replica);
  std::vector<T> v(static_cast<size_t>(each * n));
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < each; ++i) v[r * each + i] = order_sensitive<T>(r, i);
  Shape s = per_replica;
  s[0] *= n;
  return Array::from_vector<T>(v, s);
}

// psum_scatter of every replica's x, gathered (stacked) from all replicas, against psum(x):
// replica r's result is block r of psum(x) along the scatter dimension, bit for bit.
template <class T>
void check_psum_scatter(int n, Shape shard, int64_t dim, bool tiled) {
  Mesh mesh = Mesh::threads(n);
  auto f = pmap(mesh, "r", [=](const Tensor& x) {
    return std::tuple{all_gather(psum_scatter(x, "r", dim, tiled), "r", 0, false), psum(x, "r")};
  });
  auto [scattered, total] = f(blocks<T>(n, shard));
  ASSERT_EQ(scattered.shape()[0], n);
  const int64_t d = shard[dim] / n;  // rows of the scatter dimension per replica
  const int64_t outer = num_elements(Shape(shard.begin(), shard.begin() + dim));
  const int64_t inner = num_elements(Shape(shard.begin() + dim + 1, shard.end()));
  const T* s = scattered.template data<T>();
  const T* t = total.template data<T>();
  int64_t wrong = 0;
  for (int r = 0; r < n; ++r)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < d * inner; ++k) {
        const T got = s[(r * outer + o) * d * inner + k];
        const T want = t[(o * shard[dim] + r * d) * inner + k];
        wrong += std::memcmp(&got, &want, sizeof(T)) != 0;
      }
  EXPECT_EQ(wrong, 0) << "n=" << n << " dim=" << dim << " tiled=" << tiled;
  // psum itself against the rank-order sum (the communicator's contract).
  EXPECT_EQ(t[0], testing::rank_order_sum<T>(n, 0));
}

TEST_P(Sharding, PsumScatterIsPsumsSliceBitForBit) {
  const int n = GetParam();
  for (bool tiled : {true, false}) {
    const int64_t k = tiled ? 5 : 1;
    check_psum_scatter<float>(n, {n * k, 3}, 0, tiled);
    check_psum_scatter<double>(n, {n * k, 3}, 0, tiled);
    check_psum_scatter<float>(n, {2, n * k, 7}, 1, tiled);
    check_psum_scatter<double>(n, {2, n * k, 7}, 1, tiled);
  }
  check_psum_scatter<double>(n, {3, n * 333}, 1, true);  // an odd, larger block
}

TEST_P(Sharding, AllGatherAlongAnyAxis) {
  const int n = GetParam();
  Mesh mesh = Mesh::threads(n);
  auto f = pmap(mesh, "r", [](const Tensor& x) {
    return std::tuple{all_gather(x, "r", 1, true), all_gather(x, "r", 1, false), all_gather(x, "r", 0, true)};
  });
  Array x = blocks<double>(n, {2, 3});  // replica r: rows [2r, 2r + 2)
  auto [tiled, stacked, rows] = f(x);
  ASSERT_EQ(tiled.shape(), (Shape{2, 3 * n}));
  ASSERT_EQ(stacked.shape(), (Shape{2, n, 3}));
  const double* g = x.data<double>();
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) {
        const double want = g[(r * 2 + i) * 3 + j];
        EXPECT_EQ(tiled.data<double>()[i * 3 * n + r * 3 + j], want);
        EXPECT_EQ(stacked.data<double>()[(i * n + r) * 3 + j], want);
      }
  EXPECT_TRUE(rows.bit_equal(x));
}

TEST_P(Sharding, AllToAllAgainstAHostLoop) {
  const int n = GetParam();
  Mesh mesh = Mesh::threads(n);
  auto f = pmap(mesh, "r", [](const Tensor& x, const Tensor& y) {
    return std::tuple{all_gather(all_to_all(x, "r", 1, 0, true), "r", 0, false),
                      all_gather(all_to_all(y, "r", 1, 2, false), "r", 0, false)};
  });
  Array x = blocks<float>(n, {2, 3 * n, 4});  // x_r[a, b, c] = X[r * 2 + a, b, c]
  Array y = blocks<float>(n, {2, n, 4});
  auto [tx, ty] = f(x, y);
  ASSERT_EQ(tx.shape(), (Shape{n, 2 * n, 3, 4}));
  ASSERT_EQ(ty.shape(), (Shape{n, 2, 4, n}));
  const float* X = x.data<float>();
  const float* Y = y.data<float>();
  int64_t wrong = 0;
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < n; ++j)
      for (int a = 0; a < 2; ++a)
        for (int c = 0; c < 4; ++c) {
          // tiled: out_r[j * 2 + a, b, c] = x_j[a, r * 3 + b, c]
          for (int b = 0; b < 3; ++b)
            wrong += tx.data<float>()[(((r * 2 * n) + j * 2 + a) * 3 + b) * 4 + c] !=
                     X[((j * 2 + a) * 3 * n + r * 3 + b) * 4 + c];
          // untiled, split 1 (size n) removed, new axis at 2: out_r[a, c, j] = y_j[a, r, c]
          wrong += ty.data<float>()[((r * 2 + a) * 4 + c) * n + j] != Y[((j * 2 + a) * n + r) * 4 + c];
        }
  EXPECT_EQ(wrong, 0);
}

TEST_P(Sharding, PpermuteRingAndPartial) {
  const int n = GetParam();
  Mesh mesh = Mesh::threads(n);
  std::vector<std::pair<int, int>> ring;
  for (int r = 0; r < n; ++r) ring.emplace_back(r, (r + 1) % n);
  auto f = pmap(mesh, "r", [&](const Tensor& x) {
    return std::tuple{all_gather(ppermute(x, "r", ring), "r"), all_gather(ppermute(x, "r", {{0, n - 1}}), "r")};
  });
  Array x = blocks<double>(n, {2, 3});
  auto [moved, one] = f(x);
  const double* g = x.data<double>();
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < 6; ++k) {
      EXPECT_EQ(moved.data<double>()[r * 6 + k], g[((r + n - 1) % n) * 6 + k]);
      EXPECT_EQ(one.data<double>()[r * 6 + k], r == n - 1 ? g[k] : 0.0);
    }
}

// The dict forms pack small tensors into buckets; each tensor's result must equal the
// single-tensor call's, bit for bit, whether the bucket holds every tensor or one.
TEST_P(Sharding, BucketedDictFormsEqualSingleCalls) {
  const int n = GetParam();
  for (int64_t fusion : {int64_t{1} << 20, int64_t{1024}}) {
    Mesh mesh = Mesh::threads(n);
    PmapOptions o;
    o.jit.fusion_bytes = fusion;
    std::vector<std::pair<int, int>> ring;
    for (int r = 0; r < n; ++r) ring.emplace_back(r, (r + 1) % n);
    auto f = pmap(mesh, "r", [&](const Tensor& x, const Tensor& y) {
      TensorDict d;
      d.set("a", x);
      d.set("b", reshape(y, {y.size()}));
      d.set("c", x * 2.0);
      TensorDict s = psum_scatter(d, "r"), g = all_gather(d, "r"), p = ppermute(d, "r", ring);
      // The largest difference on any replica (pmax), over every tensor and form.
      Tensor worst = scalar(DType::f64, 0.0);
      for (const auto& [name, t] : d) {
        worst = maximum(worst, max(abs(s[name] - psum_scatter(t, "r", 0, true))));
        worst = maximum(worst, max(abs(g[name] - all_gather(t, "r", 0, true))));
        worst = maximum(worst, max(abs(p[name] - ppermute(t, "r", ring))));
      }
      return pmax(worst, "r");
    }, o);
    // a and c (1536 bytes or more per replica) travel alone with 1024-byte buckets.
    Array r = f(blocks<double>(n, {32 * n, 3}), blocks<double>(n, {n, 5}));
    EXPECT_EQ(r.item<double>(), 0.0) << "fusion_bytes " << fusion;
  }
}

// Small tensors share a bucket: one collective for the three tensors with the default
// bucket, one per tensor when no two fit together (the least bucket, 1024 bytes).
TEST(ShardingBuckets, SmallTensorsShareOneCollective) {
  for (int64_t fusion : {int64_t{1} << 20, int64_t{1024}}) {  // 1024: the least allowed
    Mesh mesh = Mesh::threads(2);
    PmapOptions o;
    o.jit.fusion_bytes = fusion;
    auto f = pmap(mesh, "r", [](const Tensor& x, const Tensor& y, const Tensor& z) {
      TensorDict d;  // three independent inputs (the simplifier merges nothing)
      d.set("a", x);
      d.set("b", y);
      d.set("c", reshape(z, {z.size()}));
      TensorDict s = psum_scatter(d, "r"), g = all_gather(d, "r"), p = ppermute(d, "r", {{0, 1}, {1, 0}});
      return std::tuple{s["a"] + s["b"], s["c"], g["a"] + g["b"], g["c"], p["a"] + p["b"], p["c"]};
    }, o);
    // 1024 bytes per replica each: no two fit in a bucket of 1024.
    f(Array::full(DType::f64, {128, 2}, 1.0), Array::full(DType::f64, {128, 2}, 2.0), Array::full(DType::f64, {128, 2}, 3.0));
    int scatters = 0, gathers = 0, permutes = 0;
    for (const Node& node : f.core().entry(0).exe->graph->nodes()) {
      scatters += node.op == Op::ReduceScatter;
      gathers += node.op == Op::AllGather;
      permutes += node.op == Op::Permute;
    }
    const int want = fusion > 1024 ? 1 : 3;
    EXPECT_EQ(scatters, want) << "fusion_bytes " << fusion;
    EXPECT_EQ(gathers, want) << "fusion_bytes " << fusion;
    EXPECT_EQ(permutes, want) << "fusion_bytes " << fusion;
  }
}

// pmap's own uneven split: 10 rows over 3 replicas (4, 3, 3) gather to the 10 real rows.
TEST(ShardingUneven, AllGatherConcatenatesTheRealShards) {
  for (int n : {2, 3}) {
    Mesh mesh = Mesh::threads(n);
    auto f = pmap(mesh, "batch", [](const Tensor& x) {
      return std::tuple{all_gather(x, "batch"), all_gather(x * 2.0, "batch", 0, true)};
    });
    Array x = blocks<double>(1, {10, 3});
    auto [g, g2] = f(x);
    EXPECT_TRUE(g.bit_equal(x)) << n << " replicas";
    ASSERT_EQ(g2.shape(), (Shape{10, 3}));
    for (int i = 0; i < 30; ++i) EXPECT_EQ(g2.data<double>()[i], 2 * x.data<double>()[i]);
    // Another split of the same per-replica shapes (9 rows: 3, 3, 3 for n = 3) is not
    // mistaken for the uneven one.
    auto [h, h2] = f(blocks<double>(1, {9, 3}));
    EXPECT_EQ(h.shape(), (Shape{9, 3}));
  }
}

TEST(ShardingErrors, NameTheOpAndTheShapes) {
  Mesh mesh = Mesh::threads(2);
  auto expect_error = [&](auto fn, const std::string& what) {
    auto f = pmap(mesh, "r", fn);
    try {
      f(Array::full(DType::f32, {6, 3}, 1.0));
      ADD_FAILURE() << "no error: " << what;
    } catch (const TraceError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("sharding_collectives_test.cc"), std::string::npos) << e.what();
    }
  };
  expect_error([](const Tensor& x) { return psum_scatter(x, "r", 0, true); },
               "psum_scatter(f32[3,3]): dimension 0 (size 3) is not a multiple of the 2 replicas");
  expect_error([](const Tensor& x) { return psum_scatter(concat({x, x}, 1), "r", 1, false); },
               "psum_scatter(f32[3,6]): untiled: dimension 1 (size 6) must equal the 2 replicas");
  expect_error([](const Tensor& x) { return all_to_all(x, "r", 1, 0, true); },
               "all_to_all(f32[3,3]): dimension 1 (size 3) is not a multiple of the 2 replicas");
  expect_error([](const Tensor& x) { return ppermute(x, "r", {{0, 1}, {1, 1}}); },
               "ppermute(f32[3,3]): pair (1, 1): replica 1 already sends or 1 already receives");
  expect_error([](const Tensor& x) { return ppermute(x, "r", {{0, 2}}); },
               "ppermute(f32[3,3]): pair (0, 2) names a replica outside 0..1");
  expect_error([](const Tensor& x) { return psum_scatter(x, "nope"); }, "psum_scatter: unknown axis name 'nope'");
}

// The automatic NaN/Inf check follows a reduce-scatter as it follows an all-reduce: finite
// shards whose sum overflows f32 raise a CheckError naming the reduce_scatter, its call site
// and every replica.
TEST(ShardingChecks, AnOverflowingReduceScatterIsReported) {
  Mesh mesh = Mesh::threads(2);
  PmapOptions o;
  o.jit.checks = CheckMode::all;
  o.jit.policy = CheckPolicy::throw_error;
  auto f = pmap(mesh, "r", [](const Tensor& x) { return all_gather(psum_scatter(x, "r", 0, true), "r"); }, o);
  EXPECT_EQ(f(Array::full(DType::f32, {4, 2}, 1.0)).data<float>()[0], 2.0f);
  try {
    f(Array::full(DType::f32, {4, 2}, 3e38));
    ADD_FAILURE() << "no CheckError";
  } catch (const CheckError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Inf in reduce_scatter f32[1,2]"), std::string::npos) << what;
    EXPECT_NE(what.find("raised on replicas 0, 1 of 2"), std::string::npos) << what;
    EXPECT_NE(what.find("sharding_collectives_test.cc"), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, Sharding, ::testing::Values(2, 3));

}  // namespace
}  // namespace fjit
