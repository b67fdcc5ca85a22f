// Ranks with unequal data under mpiexec (-n 2 and -n 3), as DDP's join: every rank runs the
// steps of the rank with the most batches, a rank whose data ran out with zero rows. The job
// ends normally (a rank left waiting would be stopped by the stall abort, set to 30 s here),
// every rank ends with bitwise-equal parameters, and the result equals one replica trained
// on the same rows step by step: the concatenation of the ranks' batches of that step.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>

#include "lib/trainer.h"
#include "parallel/join.h"
#include "tests/mpi/mpi_test_main.h"
#include "tests/fixture_data.h"

namespace fjit::examples {
namespace {

using namespace fjit::training;  // the trainer; Trainer itself is lib/trainer.h's

Mesh& mesh() {
  static Mesh m = Mesh::mpi();
  return m;
}

// Every rank's fingerprint of every array; expects them all equal.
void expect_same_on_every_rank(const ArrayDict& d, const char* what) {
  std::vector<uint64_t> mine;
  for (const auto& kv : d) mine.push_back(data_fingerprint(kv.second));
  const int n = mesh().size();
  std::vector<uint64_t> all(mine.size() * n);
  mesh().comm(0).all_gather(mine.data(), all.data(), mine.size() * sizeof(uint64_t));
  for (int r = 1; r < n; ++r)
    for (size_t k = 0; k < mine.size(); ++k)
      EXPECT_EQ(all[r * mine.size() + k], all[k]) << what << " " << d.name(k) << " differs on rank " << r;
}

// Rows of several batches' column `name`, one after the other.
Array concat_rows(const std::vector<io::Batch>& parts, const std::string& name) {
  const Array& like = parts.front()[name];
  Shape s = like.shape();
  s[0] = 0;
  for (const io::Batch& b : parts) s[0] += b[name].shape()[0];
  Array out(like.dtype(), s);
  size_t at = 0;
  for (const io::Batch& b : parts) {
    std::memcpy(static_cast<std::byte*>(out.raw()) + at, b[name].raw(), b[name].nbytes());
    at += b[name].nbytes();
  }
  return out;
}

// Each rank's examples: counts that differ by more than one batch (and a rank that runs out
// in the first epoch), as when each rank reads its own files.
// Examples per rank, unequal at any rank count: 24, 8, 40, then the same pattern 4 larger.
std::vector<int64_t> rank_counts(int ranks) {
  const int64_t pattern[] = {24, 8, 40};
  std::vector<int64_t> counts;
  for (int r = 0; r < ranks; ++r) counts.push_back(pattern[r % 3] + 4 * (r / 3));
  return counts;
}

// The trainer's parts of the 16-example fixture: 10 and 3 over 2 ranks; 9, 2 and 5 over 3;
// beyond 3 ranks, parts of 2 and 1 after a first, longest part that takes the rest.
std::vector<int64_t> trainer_parts(int ranks) {
  if (ranks == 2) return {10, 3};
  if (ranks == 3) return {9, 2, 5};
  std::vector<int64_t> parts(ranks);
  int64_t rest = 16;
  for (int r = 1; r < ranks; ++r) rest -= parts[r] = r % 3 == 2 ? 1 : 2;
  parts[0] = rest;
  return parts;
}

// Linear least squares in float64, plain SGD: the means are exact to float64 rounding.
Tensor lsq_loss(const Params& p, const Tensor& x, const Tensor& y) { return mean(square(matmul(x, p["w"]) - y)); }

TEST(JoinMpi, UnevenBatchCountsEndTogetherAndEqualOneReplicaOverTheSameRows) {
  const int ranks = mesh().size(), me = mesh().first_replica();
  const std::vector<int64_t> counts = rank_counts(ranks);
  int64_t total = 0, offset = 0;
  for (int r = 0; r < ranks; ++r) total += counts[r], offset += r < me ? counts[r] : 0;
  std::vector<double> xs(total * 3), ys(total);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.37 * static_cast<double>(i) + 0.1);
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = std::cos(1.3 * static_cast<double>(i));
  const io::Dataset all({{"x", Array::from_vector<double>(xs, {total, 3})}, {"y", Array::from_vector<double>(ys, {total, 1})}});
  auto rank_batches = [&](int r) {
    int64_t begin = 0;
    for (int k = 0; k < r; ++k) begin += counts[k];
    return io::BatchIterator(all.rows(begin, begin + counts[r]), {.batch_size = 4, .seed = 9, .shuffle = true,
                                                                   .drop_last = true, .shard = {}});
  };
  auto sgd = [](const std::string& axis) {
    return [axis](const Params& p, const Tensor& x, const Tensor& y) {
      auto [loss, g] = value_and_grad(lsq_loss)(p, x, y);
      TensorDict next;
      next.set("w", p["w"] - pmean(g, axis)["w"] * 0.05);
      return std::tuple{next, pmean(loss, axis)};
    };
  };
  const ArrayDict w0{{"w", Array::from_vector<double>({0.3, -0.7, 0.2}, {3, 1})}};

  // The job: each rank its own batches, joined.
  auto step = pmap(mesh(), "batch", sgd("batch"));
  JoinedBatches batches(mesh(), rank_batches(me));
  const int64_t most = *std::max_element(counts.begin(), counts.end()) / 4;
  EXPECT_EQ(batches.steps_per_epoch(), most);
  ArrayDict w = w0;
  std::vector<double> losses;
  int joined = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    batches.set_epoch(epoch);
    while (const io::Batch* b = batches.next()) {
      joined += batches.joined();
      auto [next, loss] = step(w, (*b)["x"], (*b)["y"]);
      w = next;
      losses.push_back(loss.item<double>());
    }
  }
  EXPECT_EQ(joined, 2 * (most - counts[me] / 4));
  expect_same_on_every_rank(w, "parameter");

  // The oracle: one replica, each step over the concatenation of the ranks' batches.
  auto oracle = pmap(Mesh::threads(1), "batch", sgd("batch"));
  ArrayDict v = w0;
  std::vector<io::BatchIterator> each;
  for (int r = 0; r < ranks; ++r) each.push_back(rank_batches(r));
  size_t k = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (auto& it : each) it.set_epoch(epoch);
    for (int64_t s = 0; s < most; ++s, ++k) {
      std::vector<io::Batch> parts;
      for (auto& it : each)
        if (const io::Batch* b = it.next()) parts.push_back(b->clone());
      auto [next, loss] = oracle(v, concat_rows(parts, "x"), concat_rows(parts, "y"));
      v = next;
      ASSERT_LT(k, losses.size());
      EXPECT_NEAR(losses[k], loss.item<double>(), 1e-13 * (1 + std::abs(loss.item<double>()))) << "step " << k;
    }
  }
  EXPECT_EQ(k, losses.size());
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_NEAR(w["w"].data<double>()[i], v["w"].data<double>()[i], 1e-13) << i;
}

// Data of unknown length: Join::any agrees step by step while any rank still has a batch.
TEST(JoinMpi, StepByStepAgreementRunsUntilTheLastRankIsDone) {
  const int me = mesh().first_replica();
  const int64_t mine = 2 + 3 * me;  // 2, 5, 8 batches
  auto step = pmap(mesh(), "batch", [](const Tensor& x) { return psum(sum(x), "batch"); });
  Join join(mesh());
  const Array one = Array::full(DType::f32, {2, 1}, 1.0), none(DType::f32, {0, 1});
  int64_t steps = 0, i = 0;
  std::vector<float> sums;
  for (bool have = i < mine; join.any(have); have = ++i < mine, ++steps)
    sums.push_back(step(have ? one : none).item<float>());
  const int64_t most = 2 + 3 * (mesh().size() - 1);
  EXPECT_EQ(steps, most);
  // Step s sums 2 rows of ones from each rank that still had data.
  for (int64_t s = 0; s < steps; ++s) {
    float expected = 0;
    for (int r = 0; r < mesh().size(); ++r) expected += s < 2 + 3 * r ? 2.0f : 0.0f;
    EXPECT_EQ(sums[s], expected) << "step " << s;
  }
}

// The examples' trainer with --examples-per-process: each rank trains on its own part of the
// training set (trainer_parts), in local batches of 3 over 2 ranks and of 2 beyond. It ends
// after the longest part's steps, and equals one replica of the same train step over the
// ranks' rows of each step.
TEST(JoinMpi, TrainerWithUnequalPartsEqualsOneReplicaOverTheSameRows) {
  const io::Dataset& data = testing::fixture();  // tests/fixture_data.h
  const int ranks = mesh().size();
  TrainOptions o;
  o.batch_size = ranks <= 3 ? 6 : 2 * ranks;
  o.epochs = 2;
  o.seed = 3;
  o.log_every = 0;
  o.layers = {784, 32, 10};
  o.examples_per_process = trainer_parts(ranks);
  o.divergence_check_every = 1;
  Trainer trainer(mesh(), o, data);
  std::vector<float> losses;
  while (std::optional<StepStats> s = trainer.step()) losses.push_back(s->loss);
  const int64_t local = o.batch_size / ranks;
  const int64_t steps_per_epoch = o.examples_per_process[0] / local;  // the longest part
  EXPECT_EQ(trainer.batches_per_epoch(), steps_per_epoch);
  ASSERT_EQ(static_cast<int64_t>(losses.size()), 2 * steps_per_epoch);
  expect_same_on_every_rank(trainer.params(), "parameter");
  expect_same_on_every_rank(trainer.optimizer_state(), "optimizer state");

  // The oracle: the same train step on one replica.
  ModelSpec spec;
  spec.layers = o.layers;
  TrainStep one = make_train_step(
      Mesh::threads(1),
      TrainStepFn{.optimizer = AdamW{.lr = o.lr, .weight_decay = o.weight_decay},
                  .schedule = learning_rate_schedule(o, o.epochs * steps_per_epoch),
                  .max_grad_norm = o.max_grad_norm,
                  .model = classifier(spec),
                  .seed = o.seed},
      PmapOptions{});
  ArrayDict params = init_model(spec, o.seed);
  ArrayDict state = AdamW{}.init_state(params);
  std::vector<io::BatchIterator> parts;
  int64_t begin = 0;
  for (int64_t n : o.examples_per_process) {
    parts.emplace_back(data.rows(begin, begin + n),
                       io::BatchOptions{.batch_size = local, .seed = o.seed, .shuffle = true,
                                        .drop_last = true, .shard = {}});
    begin += n;
  }
  Array step(DType::i32, {});
  for (int64_t epoch = 0, k = 0; epoch < o.epochs; ++epoch) {
    for (auto& it : parts) it.set_epoch(epoch);
    for (int64_t s = 0; s < steps_per_epoch; ++s, ++k) {
      std::vector<io::Batch> rows;
      for (auto& it : parts)
        if (const io::Batch* b = it.next()) rows.push_back(b->clone());
      step.data<int32_t>()[0] = static_cast<int32_t>(k);
      auto [p2, s2, loss, acc, norm] = one(params, state, concat_rows(rows, "images"), concat_rows(rows, "labels"), step,
                                               Array::scalar(1.0f));
      params = p2;
      state = s2;
      EXPECT_NEAR(losses[k], loss.item<float>(), 2e-5) << "step " << k;
    }
  }
  double worst = 0;
  for (const auto& [name, a] : params)
    for (int64_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::abs(a.data<float>()[i] - trainer.params()[name].data<float>()[i])));
  EXPECT_LT(worst, 1e-5) << "largest parameter difference from one replica over the same rows";
}

TEST(JoinMpi, PartsThatDoNotFitTheJobAreRefusedOnEveryRank) {
  TrainOptions o;
  o.layers = {784, 8, 10};
  o.batch_size = 6;
  o.examples_per_process = {4};  // one count for several ranks
  const io::Dataset data({{"images", Array(DType::f32, {16, 784})}, {"labels", Array(DType::i32, {16})}});
  try {
    Trainer t(mesh(), o, data);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("one count per process (" + std::to_string(mesh().size()) + ")"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fjit::examples

int main(int argc, char** argv) {
  // A rank left waiting for one that stopped would end the job here, not at the test timeout.
  setenv("FJIT_STALL_ABORT_S", "30", 0);
  ::testing::InitGoogleTest(&argc, argv);
  fjit::examples::mesh();  // initialises MPI
  return fjit::mpi_testing::run_all_tests_on_ranks(fjit::examples::mesh().is_primary());
}
