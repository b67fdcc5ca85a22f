// A step that never ends, across MPI ranks (run under mpiexec -n 2 and -n 3): only rank 1's
// while_loop never ends (its rate is 0) while the other ranks wait for it in the pmean after the
// loop. The loop stops at its trip limit, or at the step's deadline; then every rank raises the
// same CheckError at the same step naming replica 1, no rank is left waiting, and under
// skip_step every rank keeps its state bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "core/compile/kernel_sleep_testing.h"
#include "fjit.h"
#include "parallel/pmap.h"
#include "tests/mpi/mpi_test_main.h"

namespace fjit {
namespace {

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}
int rank() { return mesh().first_replica(); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every rank's value of `mine`, in rank order.
template <class T>
std::vector<T> gather(T mine) {
  std::vector<T> all(mesh().size());
  mesh().comm(0).all_gather(&mine, all.data(), sizeof(T));
  return all;
}

auto make_step(CheckPolicy policy, int64_t max_trips, double timeout_s) {
  PmapOptions o;
  o.jit.name = "looping_step";
  o.jit.checks = CheckMode::user;
  o.jit.policy = policy;
  o.jit.while_max_trips = max_trips;
  o.jit.step_timeout_s = timeout_s;
  return pmap(
      mesh(), "batch",
      [](const Params& p, const Tensor& rate) {
        std::pair<Tensor, Tensor> init{p["x"], scalar(DType::i32, 0)};
        auto [x, n] = while_loop([](const std::pair<Tensor, Tensor>& c) { return all(c.first < 4.0); },
                                 [&](const std::pair<Tensor, Tensor>& c) {
                                   return std::pair{c.first + sum(rate), c.second + scalar(DType::i32, 1)};
                                 },
                                 init);
        TensorDict next;
        next.set("x", pmean(x, "batch"));
        return next;
      },
      o);
}

Array my_rate(bool stuck) { return Array::full(DType::f32, {1}, stuck && rank() == 1 ? 0.0 : 1.0); }
ArrayDict start() { return ArrayDict{{"x", Array::full(DType::f32, {2}, 0.5)}}; }

void every_rank_reports(int64_t max_trips, double timeout_s, const std::string& expected) {
  auto step = make_step(CheckPolicy::throw_error, max_trips, timeout_s);
  EXPECT_EQ(step(start(), my_rate(false))["x"].data<float>()[0], 4.5f);
  std::string what;
  int64_t at = -1;
  try {
    step(start(), my_rate(true));
    ADD_FAILURE() << "no CheckError on rank " << rank();
  } catch (const CheckError& e) {
    what = e.what();
    at = e.step();
  }
  EXPECT_TRUE(has(what, expected)) << what;
  EXPECT_TRUE(has(what, "raised on replica 1 of " + std::to_string(mesh().size()))) << what;
  for (int64_t s : gather(at)) EXPECT_EQ(s, 1);
  const std::vector<size_t> lengths = gather(what.size());
  for (size_t n : lengths) EXPECT_EQ(n, what.size()) << "the reports differ between ranks";
  EXPECT_EQ(step(start(), my_rate(false))["x"].data<float>()[0], 4.5f);  // the job goes on
}

TEST(LoopGuardMpi, TheTripLimitStopsRank1AndEveryRankReportsIt) {
  every_rank_reports(64, 0, "while_loop stopped at its trip limit of 64 iterations");
}

TEST(LoopGuardMpi, TheDeadlineStopsRank1AndEveryRankReportsIt) {
  every_rank_reports(0, 0.05, "the step ran past its deadline of 0.05 s");
}

TEST(LoopGuardMpi, SkipStepKeepsEveryRanksStateBitForBit) {
  auto step = make_step(CheckPolicy::skip_step, 64, 0);
  EXPECT_EQ(step(start(), my_rate(false))["x"].data<float>()[0], 4.5f);
  const ArrayDict state = start();  // below the limit: rank 1's loop runs and never ends
  const Array before = state["x"].clone();
  ArrayDict out;
  StepResult r = step.run_into(out, state, my_rate(true));
  EXPECT_TRUE(r.skipped);
  EXPECT_TRUE(r.raised(CheckKind::loop_trip_limit));
  EXPECT_TRUE(out["x"].bit_equal(before));
  for (int skipped : gather(r.skipped ? 1 : 0)) EXPECT_EQ(skipped, 1);
}

// Rank 1 sits in a long kernel (a test seam standing for one that polls) before the pmean
// while the other ranks wait in the pmean; the deadline stops rank 1's kernel, the pmean
// still pairs every rank, and every rank skips the step with its state unchanged.
TEST(LoopGuardMpi, ADeadlineHitAroundACollectiveSkipsTheStepOnEveryRank) {
  PmapOptions o;
  o.jit.name = "deadline_step";
  o.jit.checks = CheckMode::user;
  o.jit.policy = CheckPolicy::skip_step;
  o.jit.step_timeout_s = 0.3;
  auto step = pmap(mesh(), "batch", [](const Params& p, const Tensor& x) {
    TensorDict next;
    next.set("w", p["w"] - 0.1 * pmean(matmul(transpose(x), matmul(x, p["w"])), "batch"));
    return next;
  }, o);
  const ArrayDict state{{"w", Array::full(DType::f32, {3, 2}, 0.25)}};
  const Array x = Array::full(DType::f32, {4 * mesh().size(), 3}, 0.5);
  const ArrayDict good = step(state, x);
  const Array before = state["w"].clone();
  testing::sleep_in_kernel(1, Op::MatMul, 60.0);
  ArrayDict out;
  const StepResult r = step.run_into(out, state, x);
  EXPECT_TRUE(r.skipped);
  EXPECT_TRUE(r.raised(CheckKind::step_timeout));
  EXPECT_TRUE(out["w"].bit_equal(before));
  for (int skipped : gather(r.skipped ? 1 : 0)) EXPECT_EQ(skipped, 1);
  EXPECT_TRUE(step(state, x)["w"].bit_equal(good["w"])) << "the job goes on";
}

// A while_loop that never ends holds a pmean in its body (its condition reads the pmean's
// result, so every rank agrees on it). Rank 1 is slow once, so the ranks' clocks pass their
// deadlines at different iterations; they still stop at the same one (loop_guard.h), no rank
// is left in the body's pmean, and every rank throws the same report at the same step.
TEST(LoopGuardMpi, AWhileLoopWithACollectiveInItsBodyStopsTogetherOnEveryRank) {
  PmapOptions o;
  o.jit.name = "looping_step";
  o.jit.checks = CheckMode::user;
  o.jit.policy = CheckPolicy::throw_error;
  o.jit.step_timeout_s = 0.3;
  auto step = pmap(mesh(), "batch", [](const Tensor& rate) {
    std::pair<Tensor, Tensor> init{full(DType::f32, {1}, 0.0), sum(rate)};
    auto [x, r] = while_loop([](const std::pair<Tensor, Tensor>& c) { return all(c.first < 4.0); },
                             [](const std::pair<Tensor, Tensor>& c) {
                               return std::pair{c.first + pmean(c.second * 1.0, "batch"), c.second};
                             },
                             init);
    return pmean(x, "batch");
  }, o);
  EXPECT_EQ(step(Array::full(DType::f32, {1}, 1.0)).data<float>()[0], 4.0f);
  testing::sleep_in_kernel(1, Op::AllReduce, 0.1);
  std::string what;
  int64_t at = -1;
  try {
    step(Array::full(DType::f32, {1}, 0.0));  // rate 0 on every rank: never ends
    ADD_FAILURE() << "no CheckError on rank " << rank();
  } catch (const CheckError& e) {
    what = e.what();
    at = e.step();
  }
  EXPECT_TRUE(has(what, "while_loop stopped: the step ran past its deadline of 0.3 s")) << what;
  for (int64_t s : gather(at)) EXPECT_EQ(s, 1);
  EXPECT_EQ(step(Array::full(DType::f32, {1}, 1.0)).data<float>()[0], 4.0f) << "the job goes on";
}

}  // namespace
}  // namespace fjit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // A rank left waiting would abort the job with the stall report instead of hanging it.
  setenv("FJIT_STALL_ABORT_S", "60", 0);
  fjit::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::rank() == 0);
}
