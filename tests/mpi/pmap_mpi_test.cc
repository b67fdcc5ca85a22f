// pmap across MPI ranks (run under mpiexec -n 2 and -n 3): a data-parallel step equals the
// single-process step on the whole batch, uneven shards give exact means, and ranks that
// trace different programs fail together with a clear error instead of hanging.
#include <gtest/gtest.h>
#include <mpi.h>

#include <random>
#include <string>
#include <vector>

#include "fjit.h"
#include "parallel/pmap.h"
#include "tests/test_util.h"
#include "tests/mpi/mpi_test_main.h"

namespace fjit {
namespace {

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

using testing::random_f32;

Array rows(const Array& a, int64_t b, int64_t e) {
  Shape s = a.shape();
  s[0] = e - b;
  const size_t row = a.nbytes() / a.shape()[0];
  return Array::from_data(a.data<float>() + b * (row / 4), s);
}

std::tuple<Tensor, Tensor> lsq_grad(const Tensor& w, const Tensor& x, const Tensor& y) {
  Tensor r = matmul(x, w) - y;
  return {mean(r * r), matmul(x, r, true) * (2.0 / x.dim(0))};
}

// psum, pmean, pmax, all_gather and axis_index against closed forms over the ranks.
TEST(PmapMpi, TheMpiBackendDescribesItselfThroughTheMesh) {
  const Mesh& m = mesh();
  EXPECT_EQ(m.backend(), "mpi");
  EXPECT_EQ(m.description(), "MPI ranks");
  EXPECT_EQ(m.local_size(), 1);
  EXPECT_EQ(m.processes(), m.size());
  ASSERT_NE(m.process_comm(), nullptr);
  EXPECT_EQ(m.process_comm()->rank(), m.first_replica());
  EXPECT_EQ(m.process_comm(), &m.comm(0));  // a rank's one replica talks for its process
  Array mine = Array::from_vector<float>({static_cast<float>(m.first_replica())}, {1});
  EXPECT_EQ(m.shard(mine).size(), 1u);  // a rank holds its shard already
  Array r = m.replicate(mine);
  EXPECT_EQ(r.data<float>()[0], 0.0f);  // process 0's value everywhere
}

TEST(PmapMpi, CollectivesMatchClosedForms) {
  const int n = mesh().size();
  auto f = pmap(mesh(), "r", [](const Tensor& x) {
    Tensor i = cast(axis_index("r"), DType::f32) + 1.0;  // 1..n
    return std::tuple{psum(i, "r"), pmean(i, "r"), pmax(i, "r"), all_gather(reshape(i, {1}), "r"),
                      psum(sum(x), "r")};
  });
  auto [s, m, mx, g, total] = f(Array::full(DType::f32, {2, 3}, 1.0));  // this rank's shard
  EXPECT_EQ(s.item<float>(), n * (n + 1) / 2.0f);
  EXPECT_FLOAT_EQ(m.item<float>(), (n + 1) / 2.0f);
  EXPECT_EQ(mx.item<float>(), static_cast<float>(n));
  ASSERT_EQ(g.size(), n);
  for (int r = 0; r < n; ++r) EXPECT_EQ(g.data<float>()[r], r + 1.0f);
  EXPECT_EQ(total.item<float>(), n * 2 * 3.0f);
}

// Every rank trains on its own data; the divergence check compares every output across ranks
// after every step (it throws on the first difference).
TEST(PmapMpi, RanksStayBitwiseEqualOverManySteps) {
  const int rank = mesh().first_replica();
  PmapOptions o;
  o.divergence_check_every = 1;
  auto f = pmap(mesh(), "b", [](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = lsq_grad(p["w"], x, y);
    TensorDict next;
    next.set("w", p["w"] - pmean(g, "b") * 0.05);
    return next;
  }, o);
  ArrayDict p = mesh().replicate(ArrayDict{{"w", random_f32({5, 1}, 11)}});
  for (int step = 0; step < 50; ++step) {
    p = f(p, random_f32({3 + rank, 5}, 100 + 7 * step + rank), random_f32({3 + rank, 1}, 200 + step));
  }
  EXPECT_TRUE(std::isfinite(p["w"].data<float>()[0]));
}

TEST(PmapMpi, StepEqualsSingleProcessStepOnWholeBatch) {
  const int n = mesh().size(), rank = mesh().first_replica();
  const int64_t batch = 7 * n + 1;  // uneven on purpose
  Array x = random_f32({batch, 5}, 1), y = random_f32({batch, 1}, 2);
  auto [b, e] = Mesh::shard_range(batch, n, rank);
  Array xs = rows(x, b, e), ys = rows(y, b, e);
  auto single = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = lsq_grad(p["w"], x, y);
    TensorDict next;
    next.set("w", p["w"] - g * 0.1);
    return std::tuple{next, loss};
  });
  auto parallel = pmap(mesh(), "batch", [](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = lsq_grad(p["w"], x, y);
    TensorDict next;
    next.set("w", p["w"] - pmean(g, "batch") * 0.1);
    return std::tuple{next, pmean(loss, "batch")};
  });
  ArrayDict ps{{"w", random_f32({5, 1}, 3)}};
  ArrayDict pp = mesh().replicate(ps);
  for (int step = 0; step < 10; ++step) {
    auto [ns, ls] = single(ps, x, y);
    auto [np, lp] = parallel(pp, xs, ys);
    EXPECT_NEAR(lp.item<float>(), ls.item<float>(), 1e-5f);
    ps = ns;
    pp = np;
  }
  for (int64_t i = 0; i < 5; ++i) EXPECT_NEAR(pp["w"].data<float>()[i], ps["w"].data<float>()[i], 1e-5f);
  // Every rank holds bitwise-identical parameters.
  uint64_t fp = data_fingerprint(pp["w"]);
  std::vector<uint64_t> all(n);
  mesh().comm(0).all_gather(&fp, all.data(), sizeof fp);
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], all[0]);
}

Tensor two_layer_loss(const Params& p, const Tensor& x, const Tensor& y) {
  Tensor h = tanh(matmul(x, p["w1"]) + p["b1"]);
  Tensor e = matmul(h, p["w2"]) + p["b2"] - y;
  return mean(e * e);
}

// Overlapped all-reduces (each rank's collective worker calls MPI: main() set FJIT_OVERLAP=1
// before MPI started, so MPI_THREAD_SERIALIZED) give
// the plain plan's values bit for bit: SGD's fused all-reduce updates, and momentum, whose
// update reads the reduced gradients (tests/overlap_test.cc has the thread backend).
TEST(PmapMpi, OverlappedCollectivesMatchThePlainPlan) {
  const int n = mesh().size(), rank = mesh().first_replica();
  ASSERT_TRUE(mesh().comm(0).callable_from_any_thread());
  setenv("FJIT_FUSION_BYTES", "1024", 1);
  const int64_t batch = 6 * n + 1;
  Array x = random_f32({batch, 24}, 1), y = random_f32({batch, 4}, 2);
  auto [b, e] = Mesh::shard_range(batch, n, rank);
  Array xs = rows(x, b, e), ys = rows(y, b, e);
  ArrayDict p0;
  p0.set("w1", random_f32({24, 40}, 3));
  p0.set("b1", random_f32({40}, 4));
  p0.set("w2", random_f32({40, 4}, 5));
  p0.set("b2", random_f32({4}, 6));
  for (bool momentum : {false, true}) {
    std::vector<ArrayDict> finals;
    for (bool overlap : {false, true}) {
      PmapOptions o;
      o.jit.overlap = overlap ? Overlap::worker : Overlap::off;
      auto step = pmap(mesh(), "b", [momentum](const Params& p, const Params& v, const Tensor& x, const Tensor& y) {
        auto [loss, g] = value_and_grad(two_layer_loss)(p, x, y);
        const TensorDict mean_g = pmean(g, "b");
        TensorDict p2, v2;
        for (size_t i = 0; i < p.size(); ++i) {
          v2.set(p.name(i), momentum ? v.value(i) * 0.9f + mean_g.value(i) : v.value(i));
          p2.set(p.name(i), p.value(i) - (momentum ? v2.value(i) : mean_g.value(i)) * 0.05f);
        }
        return std::tuple{p2, v2, pmean(loss, "b")};
      }, o);
      ArrayDict p = mesh().replicate(p0), v = mesh().replicate(p0);
      for (int s = 0; s < 4; ++s) {
        auto out = step(p, v, xs, ys);
        p = std::get<0>(out);
        v = std::get<1>(out);
      }
      if (overlap) {
        const std::string plan = step.jit_core().last_entry()->exe->plan_string();
        EXPECT_NE(plan.find("[overlapped #"), std::string::npos) << plan;
      }
      finals.push_back(p);
    }
    for (size_t i = 0; i < finals[0].size(); ++i)
      EXPECT_TRUE(finals[0].value(i).bit_equal(finals[1].value(i)))
          << (momentum ? "momentum " : "sgd ") << finals[0].name(i) << " differs on rank " << rank;
  }
  unsetenv("FJIT_FUSION_BYTES");
}

TEST(PmapMpi, RanksTracingDifferentProgramsFailTogether) {
  const int rank = mesh().first_replica();
  auto f = pmap(mesh(), "batch", [](const Params& p, const Tensor& x) {
    return pmean(matmul(x, p["w"]), "batch");
  });
  const int64_t hidden = rank == 1 ? 4 : 3;  // rank 1 has a differently shaped parameter
  ArrayDict p{{"w", random_f32({2, hidden}, 1)}};
  try {
    f(p, random_f32({2, 2}, 2));
    FAIL() << "expected ReplicaMismatchError on rank " << rank;
  } catch (const ReplicaMismatchError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("replicas traced different programs"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[2,4]"), std::string::npos) << m;  // rank 1's program is shown
    EXPECT_NE(m.find("f32[2,3]"), std::string::npos) << m;
  }
  // The communicator is still in step on every rank afterwards.
  int one = 1;
  mesh().comm(0).all_reduce(&one, 1, DType::i32, ReduceOp::sum);
  EXPECT_EQ(one, mesh().size());
}

// A model that reduces over the features first traces the same graph for 32 and 33 features;
// the input shapes (all but the split axis) still make the programs differ, on every rank.
TEST(PmapMpi, RanksFeedingDifferentFeatureCountsFailTogether) {
  const int rank = mesh().first_replica();
  auto f = pmap(mesh(), "batch", [](const Tensor& x) { return pmean(mean(sum(x, {1})), "batch"); });
  const int64_t features = rank == 1 ? 33 : 32;
  try {
    f(random_f32({4 + rank, features}, 3));  // uneven rows are fine; the features are not
    FAIL() << "expected ReplicaMismatchError on rank " << rank;
  } catch (const ReplicaMismatchError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("replicas traced different programs"), std::string::npos) << m;
    EXPECT_NE(m.find(",33]"), std::string::npos) << m;
    EXPECT_NE(m.find(",32]"), std::string::npos) << m;
  }
  // Equal features with uneven rows are one program.
  EXPECT_NO_THROW(f(random_f32({4 + rank, 32}, 4)));
}

// A trace error on one rank only (its input does not fit the model) reaches every rank as
// the same error naming that rank, instead of leaving the others waiting until an abort.
TEST(PmapMpi, ATraceErrorOnOneRankIsRaisedOnEveryRank) {
  const int rank = mesh().first_replica();
  auto f = pmap(mesh(), "batch", [](const Params& p, const Tensor& x) {
    return pmean(mean(matmul(x, p["w"])), "batch");
  });
  ArrayDict p{{"w", random_f32({32, 3}, 1)}};
  const int64_t features = rank == 1 ? 33 : 32;
  try {
    f(p, random_f32({4, features}, 2));
    FAIL() << "expected a TraceError on rank " << rank;
  } catch (const TraceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tracing failed on replica 1 of " + std::to_string(mesh().size())), std::string::npos) << m;
    EXPECT_NE(m.find("matmul(f32[4,33], f32[32,3])"), std::string::npos) << m;
    EXPECT_NE(m.find("pmap_mpi_test.cc"), std::string::npos) << m;
  }
  // Every rank goes on: the next call with fitting inputs runs.
  EXPECT_NO_THROW(f(p, random_f32({4, 32}, 3)));
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  setenv("FJIT_OVERLAP", "1", 1);  // MPI_THREAD_SERIALIZED, for the collective worker
  fjit::mesh();                    // initialises MPI
  unsetenv("FJIT_OVERLAP");
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::mesh().first_replica() == 0);
}
