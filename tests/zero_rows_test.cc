// Zero-row batches, the case of a replica or process that joined the remaining steps with no
// data (parallel/join.h): ops over an empty batch axis give zeros, never NaN, and raise no
// check even with every automatic check on; pmap over thread replicas with zero-row shards
// equals one replica over the same rows; accumulate_gradients takes zero rows; Join and
// JoinedBatches in a one-process job.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fjit.h"
#include "parallel/join.h"
#include "parallel/pmap.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::random_f32;

constexpr int64_t kIn = 300, kHidden = 200, kClasses = 10;

ArrayDict mlp() {
  return {{"w1", random_f32({kIn, kHidden}, 1)}, {"b1", random_f32({kHidden}, 2)},
          {"w2", random_f32({kHidden, kClasses}, 3)}, {"b2", random_f32({kClasses}, 4)}};
}

// Mean softmax cross entropy of a two-layer MLP, with the user checks of a production step.
Tensor mlp_loss(const Params& q, const Tensor& x, const Tensor& y) {
  Tensor logits = matmul(relu(matmul(x, q["w1"]) + q["b1"]), q["w2"]) + q["b2"];
  check(all((y > -1.0) && (y < static_cast<double>(kClasses))), "labels in [{}, {}]", min(y), max(y));
  Tensor loss = mean(softmax_cross_entropy(logits, y));
  check(isfinite(loss), "loss {} is not finite", loss);
  return loss;
}

Array labels(int64_t rows, int seed) {
  Array y(DType::i32, {rows});
  for (int64_t i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + seed) % kClasses);
  return y;
}

Array filled(DType dtype, Shape shape, double v) { return Array::full(dtype, std::move(shape), v); }

JitOptions all_checks() {
  JitOptions o;
  o.checks = CheckMode::all;
  o.policy = CheckPolicy::throw_error;
  return o;
}

// Every op of a classifier's step over a batch of zero rows, with every automatic check on:
// a raised check would throw. Outputs are written over NaN-filled arrays, so a kernel that
// skipped its empty reduction (a product over K = 0) would leave NaN behind.
TEST(ZeroRows, OpsOverAnEmptyBatchGiveZerosAndRaiseNoCheck) {
  auto f = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    Tensor logits = matmul(x, p["w1"]);  // M = 0
    return std::tuple{loss, g, sum(x, {0}), mean(x, {0}), softmax(logits), log_softmax(logits)};
  }, all_checks());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ArrayDict p = mlp();
  std::tuple<Array, ArrayDict, Array, Array, Array, Array> out{
      filled(DType::f32, {}, nan), ArrayDict{}, filled(DType::f32, {kIn}, nan),
      filled(DType::f32, {kIn}, nan), Array(DType::f32, {0, kHidden}), Array(DType::f32, {0, kHidden})};
  for (const auto& [name, a] : p) std::get<1>(out).set(name, filled(DType::f32, a.shape(), nan));
  f.run_into(out, p, Array(DType::f32, {0, kIn}), Array(DType::i32, {0}));
  auto& [loss, g, s, m, sm, lsm] = out;
  EXPECT_EQ(loss.item<float>(), 0.0f) << "the mean of no rows is 0";
  for (const auto& [name, a] : g) {
    ASSERT_EQ(a.shape(), p[name].shape()) << name;
    for (int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.data<float>()[i], 0.0f) << name << "[" << i << "]";
  }
  for (const Array* a : {&s, &m})
    for (int64_t i = 0; i < a->size(); ++i) ASSERT_EQ(a->data<float>()[i], 0.0f) << i;
  EXPECT_EQ(sm.shape(), (Shape{0, kHidden}));
  EXPECT_EQ(lsm.shape(), (Shape{0, kHidden}));
  EXPECT_EQ(metrics().checks_raised.load(), 0);
}

// The same step data-parallel: 3 thread replicas over batches of 2 rows (shards 1, 1, 0) and 1
// row (1, 0, 0) equal one replica over the same rows; no check is raised on the empty shards.
TEST(ZeroRows, PmapWithZeroRowShardsEqualsOneReplicaOverTheSameRows) {
  auto step_fn = [](const std::string& axis) {
    return [axis](const Params& p, const Tensor& x, const Tensor& y) {
      auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
      return std::tuple{pmean(loss, axis), pmean(g, axis)};
    };
  };
  PmapOptions po;
  po.jit = all_checks();
  auto three = pmap(Mesh::threads(3), "b", step_fn("b"), po);
  auto one = pmap(Mesh::threads(1), "b", step_fn("b"), po);
  const ArrayDict p = mlp();
  metrics().reset();
  for (int64_t rows : {2, 1}) {
    const Array x = random_f32({rows, kIn}, 10 + static_cast<uint32_t>(rows)), y = labels(rows, 3);
    auto [l3, g3] = three(p, x, y);
    auto [l1, g1] = one(p, x, y);
    ASSERT_TRUE(std::isfinite(l3.item<float>()));
    // f32: one replica sums each product over every row at once, three sum per shard first.
    EXPECT_NEAR(l3.item<float>(), l1.item<float>(), 1e-5 * (1 + std::abs(l1.item<float>()))) << rows << " rows";
    for (const auto& [name, a] : g1)
      for (int64_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(g3[name].data<float>()[i], a.data<float>()[i], 1e-5 * (1 + std::abs(a.data<float>()[i])))
            << name << "[" << i << "], " << rows << " rows";
  }
  EXPECT_EQ(metrics().checks_raised.load(), 0);
}

// A process with no data at all feeds a zero-row batch to every thread replica: the means are
// 0 (all weights are 1 when no replica has rows), not NaN.
TEST(ZeroRows, AZeroRowBatchOnEveryReplicaGivesZeros) {
  auto f = pmap(Mesh::threads(2), "b", [](const Params& p, const Tensor& x, const Tensor& y) {
    auto [loss, g] = value_and_grad(mlp_loss)(p, x, y);
    return std::tuple{pmean(loss, "b"), pmean(g, "b")};
  });
  auto [loss, g] = f(mlp(), Array(DType::f32, {0, kIn}), Array(DType::i32, {0}));
  EXPECT_EQ(loss.item<float>(), 0.0f);
  for (const auto& [name, a] : g)
    for (int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.data<float>()[i], 0.0f) << name;
}

TEST(ZeroRows, AccumulateGradientsOverZeroRowsIsZero) {
  auto f = jit([](const Params& p, const Tensor& x, const Tensor& y) {
    return accumulate_gradients(mlp_loss, 4)(p, x, y);
  }, all_checks());
  auto [loss, g] = f(mlp(), Array(DType::f32, {0, kIn}), Array(DType::i32, {0}));
  EXPECT_EQ(loss.item<float>(), 0.0f);
  for (const auto& [name, a] : g)
    for (int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.data<float>()[i], 0.0f) << name;
  // More than zero rows but fewer than the micro-batches is still an error.
  const std::string e = testing::error_of<TraceError>([&] { f(mlp(), random_f32({2, kIn}, 1), labels(2, 0)); });
  EXPECT_NE(e.find("2 rows cannot make 4 micro-batches"), std::string::npos) << e;
}

// One process (thread replicas): nothing to agree with, its own counts are the job's.
TEST(ZeroRows, JoinInOneProcessUsesItsOwnCounts) {
  Mesh mesh = Mesh::threads(2);
  Join join(mesh);
  EXPECT_EQ(join.steps(5), 5);
  EXPECT_TRUE(join.any(true));
  EXPECT_FALSE(join.any(false));
  EXPECT_THROW(join.steps(-1), std::invalid_argument);

  io::Dataset data({{"x", random_f32({10, 3}, 1)}, {"y", labels(10, 0)}});
  JoinedBatches batches(mesh, io::BatchIterator(data, {.batch_size = 4, .seed = 1}));
  EXPECT_EQ(batches.steps_per_epoch(), 2);  // 10 rows in batches of 4, the last 2 dropped
  int steps = 0;
  while (const io::Batch* b = batches.next()) {
    EXPECT_FALSE(batches.joined());
    EXPECT_EQ(b->index, steps++);
    EXPECT_EQ((*b)["x"].shape(), (Shape{4, 3}));
  }
  EXPECT_EQ(steps, 2);
  EXPECT_THROW(batches.seek(0, 3), std::invalid_argument);

  const io::Batch empty = empty_batch(data);
  EXPECT_EQ(empty["x"].shape(), (Shape{0, 3}));
  EXPECT_EQ(empty["y"].dtype(), DType::i32);
  EXPECT_EQ(empty["y"].shape(), (Shape{0}));
}

TEST(ZeroRows, DatasetRowsIsASliceOfTheExamples) {
  const Array x = random_f32({6, 2}, 5);
  io::Dataset data({{"x", x}});
  io::Dataset part = data.rows(2, 5);
  ASSERT_EQ(part.size(), 3);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(part["x"].data<float>()[i], x.data<float>()[4 + i]);
  EXPECT_EQ(data.rows(6, 6).size(), 0);
  EXPECT_THROW(data.rows(4, 7), std::out_of_range);
}

}  // namespace
}  // namespace fjit
