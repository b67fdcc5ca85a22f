// Checks across thread replicas: three replicas run the same compiled plan; only replica 1
// (or 2) gets bad data. Every replica must react at the same step, with the same report
// naming the replica that raised, and none may be left waiting in a collective.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <limits>

#include "fjit.h"
#include "parallel/shm_communicator.h"
#include "tests/alloc_counter.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using namespace std::chrono_literals;

constexpr int kReplicas = 3;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A hang aborts the process (a loud failure) instead of timing the test out.
StallPolicy strict_policy() {
  StallPolicy p;
  p.warn_after = 5s;
  p.abort_after = 60s;
  return p;
}

JitOptions replica_options(CheckMode mode, CheckPolicy policy) {
  JitOptions o;
  o.name = "replica_step";
  o.checks = mode;
  o.policy = policy;
  o.num_replicas = kReplicas;
  return o;
}

auto make_step(CheckMode mode, CheckPolicy policy) {
  return jit([](const Tensor& x) {
    Tensor s = sum(x);
    check(isfinite(s), "batch sum is {}", s);
    return s * 2.0;
  }, replica_options(mode, policy));
}

struct Outcome {
  int loop_step = -1;        // the iteration at which the replica threw
  int64_t error_step = -1;   // CheckError::step()
  std::string what;
  std::vector<bool> skipped;
};

// Runs `steps` steps on every replica through JitCore::run with the replica's communicator;
// `bad(r, step)` says which replica gets the poisoned batch when.
template <class Step, class Bad>
std::array<Outcome, kReplicas> run_replicas(Step& f, int steps, Bad bad) {
  const Array good = Array::from_vector(std::vector<float>{1, 2, 3});
  const Array poisoned = Array::from_vector(std::vector<float>{1, kNaN, 3});
  f(good);  // compiles on this thread
  const CompiledEntry& entry = *f.core().last_entry();
  std::array<Outcome, kReplicas> out;
  ShmGroup group(kReplicas, strict_policy());
  group.run([&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<Array> outs(1);
    FlatArgs args;
    for (int step = 0; step < steps; ++step) {
      args.leaves = {bad(r, step) ? &poisoned : &good};
      try {
        // Replicas sharing one JitCore pass a common step number (as pmap does).
        out[r].skipped.push_back(f.core().run(entry, args, outs, &comm, r, step).skipped);
      } catch (const CheckError& e) {
        out[r] = Outcome{step, e.step(), e.what(), out[r].skipped};
        return;
      }
    }
  });
  return out;
}

TEST(ChecksReplicas, EveryReplicaThrowsTheSameErrorNamingTheReplicaThatRaised) {
  auto f = make_step(CheckMode::user, CheckPolicy::throw_error);
  auto out = run_replicas(f, 6, [](int r, int step) { return r == 1 && step == 3; });
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_EQ(out[r].loop_step, 3) << "replica " << r;
    EXPECT_EQ(out[r].what, out[0].what) << "replica " << r;
    EXPECT_EQ(out[r].error_step, 3) << "replica " << r;  // 0-based: the fourth step
  }
  EXPECT_NE(out[0].what.find("batch sum is nan"), std::string::npos) << out[0].what;
  EXPECT_NE(out[0].what.find("raised on replica 1 of 3"), std::string::npos) << out[0].what;
  EXPECT_NE(out[0].what.find("'replica_step'"), std::string::npos) << out[0].what;
}

TEST(ChecksReplicas, SeveralReplicasRaisingAreAllListed) {
  auto f = make_step(CheckMode::user, CheckPolicy::throw_error);
  auto out = run_replicas(f, 4, [](int r, int step) { return r != 1 && step == 2; });
  for (int r = 0; r < kReplicas; ++r) EXPECT_EQ(out[r].loop_step, 2) << "replica " << r;
  EXPECT_NE(out[0].what.find("raised on replicas 0, 2 of 3"), std::string::npos) << out[0].what;
}

TEST(ChecksReplicas, SkipStepSkipsTheSameStepOnEveryReplica) {
  testing::LogCapture logs;
  auto f = make_step(CheckMode::user, CheckPolicy::skip_step);
  auto out = run_replicas(f, 5, [](int r, int step) { return r == 2 && step == 1; });
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_EQ(out[r].loop_step, -1) << "replica " << r;
    EXPECT_EQ(out[r].skipped, (std::vector<bool>{false, true, false, false, false})) << "replica " << r;
  }
}

TEST(ChecksReplicas, AutomaticChecksAreAttributedAndLoggedOnce) {
  testing::LogCapture logs;
  auto f = jit([](const Tensor& x) { return log(x) * 2.0; }, replica_options(CheckMode::all, CheckPolicy::log));
  auto out = run_replicas(f, 3, [](int r, int step) { return r == 2 && step == 1; });
  for (int r = 0; r < kReplicas; ++r) EXPECT_EQ(out[r].skipped.size(), 3u) << "replica " << r;
  const std::string text = logs.text();
  EXPECT_NE(text.find("NaN in mul f32[3]"), std::string::npos) << text;
  EXPECT_NE(text.find("raised on replica 2 of 3"), std::string::npos) << text;
  size_t reports = 0;
  for (size_t at = text.find("check failed"); at != std::string::npos; at = text.find("check failed", at + 1)) ++reports;
  EXPECT_EQ(reports, 1u) << text;  // replica 0 logs for the group
}

TEST(ChecksReplicas, PassingStepsAllocateNothingOnAnyReplica) {
  auto f = make_step(CheckMode::all, CheckPolicy::throw_error);
  const Array good = Array::from_vector(std::vector<float>{1, 2, 3});
  f(good);
  const CompiledEntry& entry = *f.core().last_entry();
  std::array<long, kReplicas> allocations{};
  ShmGroup group(kReplicas, strict_policy());
  group.run([&](Communicator& comm) {
    std::vector<Array> outs(1);
    FlatArgs args;
    args.leaves = {&good};
    for (int warm = 0; warm < 2; ++warm) f.core().run(entry, args, outs, &comm, comm.rank());
    const long before = testing::thread_allocations();
    for (int step = 0; step < 100; ++step) f.core().run(entry, args, outs, &comm, comm.rank());
    allocations[comm.rank()] = testing::thread_allocations() - before;
  });
  for (int r = 0; r < kReplicas; ++r) EXPECT_EQ(allocations[r], 0) << "replica " << r;
}

TEST(ChecksReplicas, PmapStepRaisesOnTheCallerAndTheMeshKeepsWorking) {
  Mesh mesh = Mesh::threads(kReplicas);
  PmapOptions o;
  o.jit = replica_options(CheckMode::user, CheckPolicy::throw_error);
  auto step = pmap(mesh, "batch", [](const Tensor& x) {
    Tensor local = sum(x);
    check(isfinite(local), "shard sum is {}", local);
    return pmean(local, "batch");
  }, o);
  Array good = Array::from_vector(std::vector<float>{1, 2, 3}, {3, 1});
  Array bad = Array::from_vector(std::vector<float>{1, kNaN, 3}, {3, 1});
  EXPECT_EQ(step(good).item<float>(), 2.0f);
  try {
    step(bad);
    ADD_FAILURE() << "no CheckError";
  } catch (const CheckError& e) {
    EXPECT_NE(std::string(e.what()).find("raised on replica 1 of 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(step(good).item<float>(), 2.0f);
}

// Step numbers are 0-based and count pmap steps, not replica runs: whatever the number of
// replicas, a check raised in the pmap step with index N reports step N, as jit() does, and
// metrics().steps grows by one per pmap step.
TEST(ChecksReplicas, PmapReportsItsOwnStepNumberWhateverTheReplicaCount) {
  constexpr int kBadStep = 4;
  for (int replicas : {1, 2, 3}) {
    Mesh mesh = Mesh::threads(replicas);
    PmapOptions o;
    o.jit = replica_options(CheckMode::user, CheckPolicy::throw_error);
    o.jit.num_replicas = replicas;
    auto step = pmap(mesh, "batch", [](const Tensor& x) {
      Tensor local = sum(x);
      check(isfinite(local), "shard sum is {}", local);
      return pmean(local, "batch");
    }, o);
    const int64_t rows = 2 * replicas;
    Array good = Array::full(DType::f32, {rows, 1}, 1.0);
    Array bad = good.clone();
    const int raiser = replicas > 1 ? 1 : 0;
    bad.data<float>()[2 * raiser + 1] = kNaN;  // in the raiser's shard only
    const int64_t steps_before = metrics().steps.load();
    for (int i = 0; i < kBadStep; ++i) EXPECT_EQ(step(good).item<float>(), 2.0f) << replicas;
    try {
      step(bad);
      ADD_FAILURE() << "no CheckError with " << replicas << " replicas";
    } catch (const CheckError& e) {
      EXPECT_EQ(e.step(), kBadStep) << replicas << " replicas\n" << e.what();
      EXPECT_NE(std::string(e.what()).find("at step " + std::to_string(kBadStep) + ":"), std::string::npos) << e.what();
      if (replicas > 1) {
        EXPECT_NE(std::string(e.what()).find("raised on replica 1 of " + std::to_string(replicas)), std::string::npos)
            << e.what();
      }
    }
    EXPECT_EQ(metrics().steps.load() - steps_before, kBadStep + 1) << replicas << " replicas";
    // The step after a raised one is numbered on.
    Array bad2 = bad.clone();
    try {
      step(bad2);
      ADD_FAILURE() << "no CheckError";
    } catch (const CheckError& e) {
      EXPECT_EQ(e.step(), kBadStep + 1) << replicas << " replicas";
    }
  }
}

TEST(ChecksReplicas, JitNumbersStepsFromZeroLikePmap) {
  auto f = make_step(CheckMode::user, CheckPolicy::throw_error);
  const Array good = Array::from_vector(std::vector<float>{1, 2, 3});
  const Array bad = Array::from_vector(std::vector<float>{1, kNaN, 3});
  const int64_t steps_before = metrics().steps.load();
  for (int i = 0; i < 4; ++i) f(good);
  try {
    f(bad);
    ADD_FAILURE() << "no CheckError";
  } catch (const CheckError& e) {
    EXPECT_EQ(e.step(), 4) << e.what();
    EXPECT_NE(std::string(e.what()).find("at step 4:"), std::string::npos) << e.what();
  }
  EXPECT_EQ(f.core().step_count(), 5);
  EXPECT_EQ(metrics().steps.load() - steps_before, 5);
}

// skip_step under pmap: every replica discards the same step, the state is the one before it,
// and the step counts once in steps_skipped however many replicas raised or skipped.
TEST(ChecksReplicas, PmapSkipStepKeepsStateAndCountsTheStepOnce) {
  testing::LogCapture logs;
  Mesh mesh = Mesh::threads(kReplicas);
  PmapOptions o;
  o.jit = replica_options(CheckMode::user, CheckPolicy::skip_step);
  auto step = pmap(mesh, "batch", [](const Params& p, const Tensor& x) {
    Tensor g = pmean(sum(x), "batch");
    check(isfinite(g), "mean shard sum is {}", g);
    TensorDict next;
    next.set("w", p["w"] - g * 0.5);
    return next;
  }, o);
  ArrayDict p{{"w", Array::from_vector(std::vector<float>{1, 2, 3})}};
  Array good = Array::full(DType::f32, {kReplicas, 1}, 1.0);
  Array bad = good.clone();
  bad.data<float>()[1] = kNaN;  // replica 1's shard
  p = step(p, good);
  const ArrayDict before{{"w", p["w"].clone()}};
  const int64_t skipped = metrics().steps_skipped.load();
  ArrayDict out;
  StepResult r = step.run_into(out, p, bad);
  EXPECT_TRUE(r.skipped);
  EXPECT_TRUE(out["w"].bit_equal(before["w"]));
  EXPECT_EQ(metrics().steps_skipped.load() - skipped, 1);
  EXPECT_TRUE(logs.contains("step skipped")) << logs.text();
  EXPECT_TRUE(logs.contains("at step 1:")) << logs.text();
}

}  // namespace
}  // namespace fjit
