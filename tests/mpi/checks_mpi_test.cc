// Checks across MPI ranks (run under mpiexec -n 2 and -n 3): only rank 1 gets bad data (a NaN
// in its shard, or a label out of range). Every rank must raise the same CheckError at the same
// step, naming replica 1 as the raiser, and go on working afterwards (no rank is left waiting
// in a collective); under skip_step every rank skips the same step and the parameters stay
// bit-identical across ranks and equal to their values before that step.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>

#include "fjit.h"
#include "parallel/pmap.h"
#include "tests/mpi/mpi_test_main.h"

namespace fjit {
namespace {

constexpr int kClasses = 3;
constexpr int64_t kRows = 2;  // per rank
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}
int rank() { return mesh().first_replica(); }

// Every rank's value of `mine`, in rank order.
template <class T>
std::vector<T> gather(T mine) {
  std::vector<T> all(mesh().size());
  mesh().comm(0).all_gather(&mine, all.data(), sizeof(T));
  return all;
}

Tensor loss_fn(const Params& p, const Tensor& x, const Tensor& y) {
  check(all(y > -1.0) && all(y < static_cast<double>(kClasses)),
        "label out of range [0, 3) in this shard");
  Tensor loss = mean(softmax_cross_entropy(matmul(x, p["w"]) + p["b"], y));
  check(isfinite(loss), "shard loss is {}", loss);
  return loss;
}

auto make_step(CheckPolicy policy) {
  PmapOptions o;
  o.jit.name = "mpi_train_step";
  o.jit.checks = CheckMode::user;
  o.jit.policy = policy;
  return pmap(
      mesh(), "batch",
      [](const Params& p, const Tensor& x, const Tensor& y) {
        auto [loss, g] = value_and_grad(loss_fn)(p, x, y);
        return std::tuple{sgd(p, pmean(g, "batch"), 0.1), pmean(loss, "batch")};
      },
      o);
}

ArrayDict initial_params() {
  ArrayDict p;
  Array w(DType::f32, {4, kClasses});
  for (int64_t i = 0; i < w.size(); ++i)
    w.data<float>()[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
  p.set("w", w);
  p.set("b", Array::full(DType::f32, {kClasses}, 0.0));
  return mesh().replicate(p);
}

// This rank's shard for `step`: different data on every rank and step, all of it valid.
std::pair<Array, Array> shard(int step) {
  Array x(DType::f32, {kRows, 4});
  for (int64_t i = 0; i < x.size(); ++i)
    x.data<float>()[i] = 0.25f * static_cast<float>((i + 3 * step + 5 * rank()) % 7) - 0.5f;
  Array y(DType::i32, {kRows});
  for (int64_t i = 0; i < kRows; ++i)
    y.data<int32_t>()[i] = static_cast<int32_t>((i + step + rank()) % kClasses);
  return {x, y};
}

uint64_t text_hash(const std::string& s) { return std::hash<std::string>{}(s); }

struct Raised {
  int loop_step = -1;
  int64_t error_step = -1;
  std::string what;
};

// Runs `steps` steps under the throw policy; rank 1's shard of step `bad_step` is spoiled by
// `spoil`. Returns where this rank's CheckError came from, then runs one more clean step that
// every rank must complete (their collectives are still in step).
Raised run_until_raised(int steps, int bad_step, const std::function<void(Array&, Array&)>& spoil) {
  auto step = make_step(CheckPolicy::throw_error);
  ArrayDict p = initial_params();
  Raised out;
  for (int s = 0; s < steps && out.loop_step < 0; ++s) {
    auto [x, y] = shard(s);
    if (s == bad_step && rank() == 1) spoil(x, y);
    try {
      p = std::get<0>(step(p, x, y));
    } catch (const CheckError& e) {
      out = Raised{s, e.step(), e.what()};
    }
  }
  auto [x, y] = shard(steps);
  auto [next, loss] = step(p, x, y);
  EXPECT_TRUE(std::isfinite(loss.item<float>()));
  return out;
}

void expect_same_error_on_every_rank(const Raised& r, int bad_step, const std::string& message) {
  const int n = mesh().size();
  EXPECT_EQ(r.loop_step, bad_step) << "rank " << rank();
  EXPECT_EQ(r.error_step, bad_step) << "rank " << rank() << ": steps are 0-based\n" << r.what;
  for (int64_t s : gather(r.error_step)) EXPECT_EQ(s, bad_step);
  for (uint64_t h : gather(text_hash(r.what)))
    EXPECT_EQ(h, text_hash(r.what)) << "reports differ across ranks";
  EXPECT_NE(r.what.find("at step " + std::to_string(bad_step) + ":"), std::string::npos) << r.what;
  EXPECT_NE(r.what.find(message), std::string::npos) << r.what;
  EXPECT_NE(r.what.find("raised on replica 1 of " + std::to_string(n)), std::string::npos)
      << r.what;
  EXPECT_NE(r.what.find("'mpi_train_step'"), std::string::npos) << r.what;
  EXPECT_NE(r.what.find("checks_mpi_test.cc:"), std::string::npos) << r.what;  // the check's line
}

TEST(ChecksMpi, NanOnRankOneRaisesTheSameErrorOnEveryRankAtTheSameStep) {
  const Raised r = run_until_raised(6, 3, [](Array& x, Array&) { x.data<float>()[1] = kNaN; });
  expect_same_error_on_every_rank(r, 3, "shard loss is nan");
  EXPECT_EQ(r.what.find("label out of range"), std::string::npos) << r.what;
}

TEST(ChecksMpi, LabelOutOfRangeOnRankOneRaisesTheSameErrorOnEveryRank) {
  const Raised r = run_until_raised(5, 2, [](Array&, Array& y) { y.data<int32_t>()[0] = 7; });
  expect_same_error_on_every_rank(r, 2, "label out of range [0, 3) in this shard");
}

TEST(ChecksMpi, SkipStepSkipsTheSameStepOnEveryRankAndKeepsParametersIdentical) {
  constexpr int kSteps = 5, kBad = 2;
  auto step = make_step(CheckPolicy::skip_step);
  ArrayDict p = initial_params();
  std::vector<int> skipped;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = shard(s);
    if (s == kBad && rank() == 1) x.data<float>()[0] = kNaN;
    const ArrayDict before{{"w", p["w"].clone()}, {"b", p["b"].clone()}};
    std::tuple<ArrayDict, Array> out;
    const StepResult r = step.run_into(out, p, x, y);
    skipped.push_back(r.skipped ? 1 : 0);
    const ArrayDict& next = std::get<0>(out);
    for (const char* name : {"w", "b"}) {
      // Bit-identical on every rank after every step, skipped or not.
      for (uint64_t fp : gather(data_fingerprint(next[name])))
        EXPECT_EQ(fp, data_fingerprint(next[name])) << name << " step " << s;
      if (r.skipped)
        EXPECT_TRUE(next[name].bit_equal(before[name])) << name << " changed in a skipped step";
      else
        EXPECT_FALSE(next[name].bit_equal(before[name])) << name << " did not train at step " << s;
    }
    p = next;
  }
  std::vector<int> expected(kSteps, 0);
  expected[kBad] = 1;
  EXPECT_EQ(skipped, expected) << "rank " << rank();
  int mask = 0;
  for (int s = 0; s < kSteps; ++s) mask |= skipped[s] << s;
  for (int m : gather(mask)) EXPECT_EQ(m, 1 << kBad);
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
