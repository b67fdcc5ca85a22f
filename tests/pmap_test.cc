// pmap over thread replicas: collectives against closed forms, a data-parallel step equal to
// the single-replica step on the whole batch, exact means for uneven batches, bitwise-equal
// replicas, the divergence check, and errors that name the axis.
#include <gtest/gtest.h>

#include <random>

#include "fjit.h"
#include "parallel/pmap.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::random_f32;

class PmapReplicas : public ::testing::TestWithParam<int> {};

TEST_P(PmapReplicas, CollectivesMatchClosedForms) {
  const int n = GetParam();
  Mesh mesh = Mesh::threads(n);
  auto f = pmap(mesh, "r", [](const Tensor& x) {
    Tensor i = cast(axis_index("r"), DType::f32) + 1.0;  // 1..n
    return std::tuple{psum(i, "r"), pmean(i, "r"), pmax(i, "r"), all_gather(reshape(i, {1}), "r"), psum(sum(x), "r")};
  });
  Array x = Array::full(DType::f32, {static_cast<int64_t>(n) * 2, 3}, 1.0);
  auto [s, m, mx, g, total] = f(x);
  EXPECT_EQ(s.item<float>(), n * (n + 1) / 2.0f);
  EXPECT_FLOAT_EQ(m.item<float>(), (n + 1) / 2.0f);
  EXPECT_EQ(mx.item<float>(), static_cast<float>(n));
  ASSERT_EQ(g.size(), n);
  for (int r = 0; r < n; ++r) EXPECT_EQ(g.data<float>()[r], r + 1.0f);
  EXPECT_EQ(total.item<float>(), n * 2 * 3.0f);  // every shard's sum, summed
}

// Linear least squares: loss = mean((x w - y)^2), gradient 2/B x^T (x w - y), SGD.
std::tuple<Tensor, Tensor> lsq_grad(const Tensor& w, const Tensor& x, const Tensor& y) {
  Tensor r = matmul(x, w) - y;
  Tensor loss = mean(r * r);
  Tensor g = matmul(x, r, /*trans_a=*/true) * (2.0 / x.dim(0));
  return {loss, g};
}

TEST_P(PmapReplicas, DataParallelStepEqualsSingleReplicaStepOnTheWholeBatch) {
  const int n = GetParam();
  const int64_t batch = 12;  // divides 1..4; with n = 5 the shards are uneven (3, 3, 2, 2, 2)
  Array x = random_f32({batch, 6}, 1), y = random_f32({batch, 2}, 2), w0 = random_f32({6, 2}, 3);
  auto single = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = lsq_grad(p["w"], x, y);
    TensorDict next;
    next.set("w", p["w"] - g * 0.1);
    return std::tuple{next, loss};
  });
  Mesh mesh = Mesh::threads(n);
  auto parallel = pmap(mesh, "batch", [](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = lsq_grad(p["w"], x, y);
    TensorDict next;
    next.set("w", p["w"] - pmean(g, "batch") * 0.1);
    return std::tuple{next, pmean(loss, "batch")};
  });
  ArrayDict ps{{"w", w0}}, pp{{"w", w0}};
  // Tolerance 1e-5: both compute the same f32 math, but the parallel step sums per-shard
  // partial sums (and weights uneven shards), so roundings of values of order 1 differ by a
  // few ulps per step; 20 steps of a contracting SGD keep that well under 1e-5.
  for (int step = 0; step < 20; ++step) {
    auto [ns, ls] = single(ps, x, y);
    auto [np, lp] = parallel(pp, x, y);
    EXPECT_NEAR(lp.item<float>(), ls.item<float>(), 1e-5f) << "step " << step;
    ps = ns;
    pp = np;
  }
  const Array& a = ps["w"];
  const Array& b = pp["w"];
  for (int64_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a.data<float>()[i], b.data<float>()[i], 1e-5f);
  EXPECT_EQ(parallel.jit_core().trace_count(), batch % n == 0 ? 1 : 2);  // one per shard shape
}

INSTANTIATE_TEST_SUITE_P(Threads, PmapReplicas, ::testing::Values(1, 2, 3, 4, 5));

TEST(Pmap, UnevenBatchGivesTheExactMean) {
  Mesh mesh = Mesh::threads(3);
  Array x = random_f32({10, 4}, 7);  // shards of 4, 3, 3 rows
  auto f = pmap(mesh, "b", [](const Tensor& x) { return pmean(mean(x, {0}), "b"); });
  Array got = f(x);
  for (int c = 0; c < 4; ++c) {
    double s = 0;
    for (int r = 0; r < 10; ++r) s += x.data<float>()[r * 4 + c];
    EXPECT_NEAR(got.data<float>()[c], s / 10, 1e-6) << "column " << c;
  }
  EXPECT_EQ(f.jit_core().trace_count(), 2);  // one plan per shard shape (4 and 3 rows)
}

// float64 over uneven shards: the shard weights are float64 too, so the averaged gradient
// agrees with one replica's to float64 rounding (an f32 weight would cost 8 digits).
TEST(Pmap, UnevenFloat64MeanIsExactToFloat64Rounding) {
  std::vector<double> xs(10 * 3), ys(10);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.9 * static_cast<double>(i) + 0.2);
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = std::cos(1.7 * static_cast<double>(i));
  const Array x = Array::from_vector<double>(xs, {10, 3}), y = Array::from_vector<double>(ys, {10, 1});
  const ArrayDict p{{"w", Array::from_vector<double>({0.3, -0.7, 0.2}, {3, 1})}};
  auto grad_of = [](int replicas) {
    return pmap(Mesh::threads(replicas), "b", [](const Params& q, const Tensor& a, const Tensor& b) {
      auto [loss, g] = value_and_grad([](const Params& w, const Tensor& a2, const Tensor& b2) {
        return mean(square(matmul(a2, w["w"]) - b2));
      })(q, a, b);
      return pmean(g, "b");
    });
  };
  auto one = grad_of(1), three = grad_of(3);  // 3 replicas: shards of 4, 3 and 3 rows
  const std::vector<double> a = one(p, x, y)["w"].to_vector<double>();
  const std::vector<double> b = three(p, x, y)["w"].to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-15 * (1 + std::abs(a[i]))) << i;
}

TEST(Pmap, ReplicasStayBitwiseEqualOverManySteps) {
  Mesh mesh = Mesh::threads(3);
  PmapOptions o;
  o.divergence_check_every = 1;  // compares every output across replicas every step
  auto f = pmap(mesh, "b", [](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = lsq_grad(p["w"], x, y);
    TensorDict next;
    next.set("w", p["w"] - pmean(g, "b") * 0.05);
    return next;
  }, o);
  ArrayDict p{{"w", random_f32({5, 1}, 11)}};
  for (int step = 0; step < 50; ++step) p = f(p, random_f32({9, 5}, 100 + step), random_f32({9, 1}, 200 + step));
  EXPECT_TRUE(std::isfinite(p["w"].data<float>()[0]));
}

TEST(Pmap, DivergenceCheckNamesTheFirstDivergingTensor) {
  Mesh mesh = Mesh::threads(2);
  PmapOptions o;
  o.divergence_check_every = 1;
  auto f = pmap(mesh, "b", [](const Params& p, const Tensor&) {
    TensorDict next;
    next.set("kept", p["kept"] * 1.0);
    next.set("drifting", p["drifting"] + cast(axis_index("b"), DType::f32));  // differs per replica
    return next;
  }, o);
  ArrayDict p{{"kept", random_f32({3}, 1)}, {"drifting", random_f32({3}, 2)}};
  try {
    f(p, random_f32({2, 1}, 3));
    FAIL() << "expected ReplicaMismatchError";
  } catch (const ReplicaMismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("first diverging tensor 'drifting'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("replica(s) 1"), std::string::npos) << e.what();
    // The first step is step 0, as in every other report.
    EXPECT_NE(std::string(e.what()).find("diverged at step 0:"), std::string::npos) << e.what();
  }
}

TEST(Pmap, UnknownAxisNameIsATraceError) {
  Mesh mesh = Mesh::threads(2);
  auto f = pmap(mesh, "batch", [](const Tensor& x) { return psum(x, "batchh"); });
  try {
    f(Array(DType::f32, {2, 2}));
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown axis name 'batchh' (pmap axes: batch)"), std::string::npos) << e.what();
  }
}

// Fewer rows than replicas leave the last replicas zero rows (weight 0 in pmean): the mean is
// still the mean over the rows there are (tests/zero_rows_test.cc covers whole steps).
TEST(Pmap, BatchSmallerThanReplicasLeavesZeroRowShards) {
  Mesh mesh = Mesh::threads(4);
  auto f = pmap(mesh, "b", [](const Tensor& x) { return std::tuple{psum(sum(x), "b"), pmean(mean(x), "b")}; });
  Array x = Array::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});  // shards of 1, 1, 1, 0 rows
  auto [s, m] = f(x);
  EXPECT_EQ(s.item<float>(), 21.0f);
  EXPECT_FLOAT_EQ(m.item<float>(), 3.5f);
  auto [s4, m4] = f(Array::full(DType::f32, {4, 2}, 1.0));
  EXPECT_EQ(s4.item<float>(), 8.0f);
  EXPECT_EQ(m4.item<float>(), 1.0f);
}

TEST(Pmap, FusedGradientAllReduceUsesOneCollectivePerBucket) {
  Mesh mesh = Mesh::threads(2);
  auto f = pmap(mesh, "b", [](const Params& g, const Tensor&) { return pmean(g, "b"); });
  ArrayDict g{{"a", random_f32({64, 32}, 1)}, {"b", random_f32({32}, 2)}, {"c", random_f32({32, 10}, 3)}};
  metrics().reset();
  ArrayDict r = f(g, Array(DType::f32, {2, 1}));
  // At run time too: one all-reduce of every gradient byte, recorded once (not per replica).
  EXPECT_EQ(metrics().allreduce_calls.load(), 1);
  EXPECT_EQ(metrics().allreduce_bytes.load(), (64 * 32 + 32 + 32 * 10) * 4);
  for (const char* k : {"a", "b", "c"})
    for (int64_t i = 0; i < g[k].size(); ++i) EXPECT_FLOAT_EQ(r[k].data<float>()[i], g[k].data<float>()[i]);
  int collectives = 0;
  for (const Node& n : f.core().last_entry()->exe->graph->nodes()) collectives += n.op == Op::AllReduce;
  EXPECT_EQ(collectives, 1);
}

}  // namespace
}  // namespace fjit
