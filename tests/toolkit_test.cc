// The training toolkit of core/lib: learning-rate schedules (closed forms on the host, the
// same values traced), gradient accumulation (against the whole batch's gradient, which is
// checked against central differences elsewhere; here against an unsplit value_and_grad of
// float64 data, and its plan's memory), and sharded batching (the processes of a job together
// see each global batch exactly once, in the order one process would).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "parallel/fjit.h"
#include "tests/alloc_counter.h"
#include "tests/test_util.h"

namespace fjit {
namespace {

using testing::error_of;

// ---- schedules ----

TEST(Schedule, HostValuesFollowTheClosedForms) {
  const double pi = std::numbers::pi;
  EXPECT_EQ(Schedule::constant(0.3)(0), 0.3);
  EXPECT_EQ(Schedule::constant(0.3)(1000000), 0.3);
  const Schedule lin = Schedule::linear(1.0, 0.0, 4);
  EXPECT_EQ(lin(0), 1.0);
  EXPECT_EQ(lin(1), 0.75);
  EXPECT_EQ(lin(4), 0.0);
  EXPECT_EQ(lin(9), 0.0);
  const Schedule cos = Schedule::cosine(2.0, 10, 0.5);
  EXPECT_DOUBLE_EQ(cos(0), 2.0);
  EXPECT_DOUBLE_EQ(cos(5), 0.5 + 1.5 * 0.5);
  EXPECT_DOUBLE_EQ(cos(3), 0.5 + 1.5 * 0.5 * (1 + std::cos(pi * 0.3)));
  EXPECT_DOUBLE_EQ(cos(10), 0.5);
  EXPECT_DOUBLE_EQ(cos(11), 0.5);
  const Schedule step = Schedule::step_decay(1.0, 3, 0.5);
  EXPECT_EQ(step(0), 1.0);
  EXPECT_EQ(step(2), 1.0);
  EXPECT_EQ(step(3), 0.5);
  EXPECT_EQ(step(8), 0.25);
  const Schedule warm = Schedule::warmup(4, Schedule::cosine(1.0, 8));
  EXPECT_EQ(warm(0), 0.0);
  EXPECT_EQ(warm(1), 0.25);
  EXPECT_EQ(warm(4), 1.0);
  EXPECT_DOUBLE_EQ(warm(8), 0.5);
  EXPECT_DOUBLE_EQ(warm(12), 0.0);
  EXPECT_EQ(warm(-3), 0.0) << "a step before 0 counts as 0";
  EXPECT_EQ(warm.describe(), "warm-up 4 steps, then cosine 1 to 0 over 8 steps");
  EXPECT_THROW(Schedule::cosine(1.0, 0), std::invalid_argument);
  EXPECT_THROW(Schedule::warmup(-1, Schedule::constant(1)), std::invalid_argument);
}

TEST(Schedule, TracedValuesEqualTheHostValuesRounded) {
  const std::vector<Schedule> schedules = {
      Schedule::constant(1e-3), Schedule::linear(0.1, 0.01, 7), Schedule::cosine(3e-4, 50, 1e-5),
      Schedule::step_decay(0.1, 6, 0.3), Schedule::warmup(5, Schedule::cosine(1e-3, 40)),
      Schedule::warmup(3, Schedule::step_decay(0.5, 4, 0.1))};
  for (const Schedule& s : schedules) {
    SCOPED_TRACE(s.describe());
    auto f32 = jit([s](const Tensor& t) { return s(t); });
    auto f64 = jit([s](const Tensor& t) { return s(t, DType::f64); });
    for (int32_t t : {0, 1, 2, 4, 5, 6, 7, 12, 13, 25, 49, 50, 51, 1000}) {
      const Array step = Array::scalar(t);
      const double host = s(t);
      EXPECT_NEAR(f64(step).item<double>(), host, 4e-16 * std::abs(host)) << "step " << t;
      const float got = f32(step).item<float>();
      EXPECT_LE(std::abs(got - static_cast<float>(host)),
                std::abs(std::nextafter(static_cast<float>(host), 1.0f) - static_cast<float>(host)))
          << "step " << t << ": traced " << got << ", host " << host;
    }
    EXPECT_EQ(f32.core().compile_count(), 1) << "the step is an argument: one compile";
  }
  // An f32 step counter (say, from a state dict) works too; a non-scalar does not.
  auto from_float = jit([](const Tensor& t) { return Schedule::cosine(1.0, 10)(t); });
  EXPECT_FLOAT_EQ(from_float(Array::scalar(5.0f)).item<float>(), 0.5f);
  auto bad = jit([](const Tensor& t) { return Schedule::constant(1.0)(t); });
  const std::string error = error_of([&] { bad(Array(DType::i32, {2})); });
  EXPECT_NE(error.find("Schedule: the step must be a numeric scalar, got i32[2]"), std::string::npos) << error;
  EXPECT_NE(error.find("toolkit_test.cc"), std::string::npos) << error;
}

// ---- gradient accumulation ----

Tensor mse(const Params& p, const Tensor& x, const Tensor& y) {
  const Tensor pred = tanh(matmul(x, p["w"]) + p["b"]);
  return mean(square(pred - y));
}

ArrayDict accumulation_params() {
  return {{"w", Array::from_vector<double>({0.3, -0.2, 0.5, 0.1, -0.4, 0.25}, {3, 2})},
          {"b", Array::from_vector<double>({0.05, -0.1}, {2})}};
}

Array ramp(int64_t rows, int64_t cols, double scale) {
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.7 * static_cast<double>(i) + 0.3);
  return Array::from_vector<double>(v, {rows, cols});
}

TEST(AccumulateGradients, EqualsTheWholeBatchForEvenAndUnevenSplits) {
  const ArrayDict p = accumulation_params();
  const Array x = ramp(10, 3, 1.0), y = ramp(10, 2, 0.5);
  auto whole = jit([](const Params& q, const Tensor& a, const Tensor& b) {
    auto [loss, g] = value_and_grad(mse)(q, a, b);
    return std::tuple{loss, g};
  });
  auto [loss, grads] = whole(p, x, y);
  for (int k : {1, 2, 3, 5, 10}) {  // 10 rows: 3 micro-batches of 4, 3, 3
    SCOPED_TRACE(std::to_string(k) + " micro-batches");
    auto split = jit([k](const Params& q, const Tensor& a, const Tensor& b) {
      auto [l, g] = accumulate_gradients(mse, k)(q, a, b);
      return std::tuple{l, g};
    });
    auto [l, g] = split(p, x, y);
    EXPECT_NEAR(l.item<double>(), loss.item<double>(), 1e-15);
    for (const auto& [name, want] : grads) {
      const std::vector<double> a = want.to_vector<double>(), b = g[name].to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-15) << name << "[" << i << "]";
    }
  }
}

// The micro-batches run as one loop (two for an uneven split): the plan, its graph and the
// loop body's plan are the same size for 2 and 64 micro-batches.
TEST(AccumulateGradients, PlanSizeDoesNotGrowWithTheNumberOfMicroBatches) {
  const ArrayDict p = accumulation_params();
  auto size_of = [&](int k, int64_t rows) {
    auto f = jit([k](const Params& q, const Tensor& a, const Tensor& b) {
      auto [l, g] = accumulate_gradients(mse, k)(q, a, b);
      return std::tuple{l, g};
    });
    f(p, ramp(rows, 3, 1.0), ramp(rows, 2, 0.5));
    const Executable& exe = *f.core().last_entry()->exe;
    int loops = 0;
    for (const Instr& in : exe.instrs) loops += in.op == Op::Scan;
    return std::tuple{exe.instrs.size(), exe.graph->size(), loops};
  };
  EXPECT_EQ(size_of(2, 128), size_of(64, 128));
  EXPECT_EQ(std::get<2>(size_of(64, 128)), 1);
  EXPECT_EQ(size_of(3, 130), size_of(60, 130));  // uneven: 130 = 1 x 44 + 2 x 43 and 10 x 3 + 50 x 2
  EXPECT_EQ(std::get<2>(size_of(60, 130)), 2);
}

TEST(AccumulateGradients, AuxRowsComeBackInOrder) {
  auto loss_with_pred = [](const Params& q, const Tensor& a, const Tensor& b) {
    const Tensor pred = matmul(a, q["w"]) + q["b"];
    return std::tuple{mean(square(pred - b)), pred};
  };
  auto step = jit([&](const Params& q, const Tensor& a, const Tensor& b) {
    auto [l, g, pred] = accumulate_gradients_aux(loss_with_pred, 3)(q, a, b);
    return pred;
  });
  auto plain = jit([](const Params& q, const Tensor& a) { return matmul(a, q["w"]) + q["b"]; });
  const ArrayDict p = accumulation_params();
  const Array x = ramp(7, 3, 1.0);
  EXPECT_TRUE(step(p, x, ramp(7, 2, 1.0)).bit_equal(plain(p, x)));
}

TEST(AccumulateGradients, MicroBatchesNeedLessWorkspace) {
  // Wide hidden activations: the whole batch's dominate the plan; 4 micro-batches hold a
  // quarter of them at a time.
  auto loss = [](const Params& q, const Tensor& a) {
    return mean(square(relu(matmul(a, q["w1"])))) ;
  };
  const ArrayDict p = {{"w1", ramp(16, 512, 0.1)}};
  const Array x = ramp(1024, 16, 1.0);
  auto bytes = [&](int k) {
    auto f = jit([&, k](const Params& q, const Tensor& a) { return std::get<1>(accumulate_gradients(loss, k)(q, a)); });
    f(p, x);
    return f.core().last_entry()->exe->workspace_bytes();
  };
  const size_t one = bytes(1), four = bytes(4);
  EXPECT_LT(four, one * 6 / 10) << "1 micro-batch: " << one << " bytes, 4: " << four;
}

TEST(AccumulateGradients, BadSplitsAreTraceErrorsNamingTheCall) {
  const ArrayDict p = accumulation_params();
  auto with = [&](int k, Array x, Array y) {
    auto f = jit([k](const Params& q, const Tensor& a, const Tensor& b) {
      return std::get<0>(accumulate_gradients(mse, k)(q, a, b));
    });
    return error_of([&] { f(p, x, y); });
  };
  std::string e = with(4, ramp(3, 3, 1), ramp(3, 2, 1));
  EXPECT_NE(e.find("accumulate_gradients(4 micro-batches) of (f64[3,3], f64[3,2]): 3 rows cannot make 4 micro-batches"),
            std::string::npos) << e;
  EXPECT_NE(e.find("toolkit_test.cc"), std::string::npos) << e;
  e = with(2, ramp(4, 3, 1), ramp(6, 2, 1));
  EXPECT_NE(e.find("disagree on their number of rows"), std::string::npos) << e;
  e = with(0, ramp(4, 3, 1), ramp(4, 2, 1));
  EXPECT_NE(e.find("at least one micro-batch"), std::string::npos) << e;
}

// ---- sharded batching ----

TEST(ShardedBatches, ProcessesTogetherSeeEachGlobalBatchOnce) {
  std::vector<int32_t> ids(23);
  for (int i = 0; i < 23; ++i) ids[i] = i;
  const io::Dataset data({{"id", Array::from_vector<int32_t>(ids, {23})},
                          {"x", ramp(23, 2, 1.0)}});
  for (bool drop_last : {true, false}) {
    io::BatchOptions whole{.batch_size = 7, .seed = 5, .drop_last = drop_last};
    io::BatchIterator all(data, whole);
    // 5 replicas in 3 processes: 2 + 2 + 1.
    const std::vector<io::Shard> shards = {{0, 2, 5}, {2, 2, 5}, {4, 1, 5}};
    std::vector<io::BatchIterator> parts;
    for (const io::Shard& s : shards) {
      io::BatchOptions o = whole;
      o.shard = s;
      parts.emplace_back(data, o);
    }
    for (int epoch = 0; epoch < 2; ++epoch) {
      all.set_epoch(epoch);
      for (auto& it : parts) it.set_epoch(epoch);
      while (const io::Batch* b = all.next()) {
        std::vector<int32_t> joined;
        for (auto& it : parts) {
          const io::Batch* mine = it.next();
          ASSERT_NE(mine, nullptr);
          EXPECT_EQ(mine->global_rows, b->global_rows);
          for (int32_t v : (*mine)["id"].to_vector<int32_t>()) joined.push_back(v);
        }
        EXPECT_EQ(joined, (*b)["id"].to_vector<int32_t>()) << "epoch " << epoch << " batch " << b->index;
      }
      for (auto& it : parts) EXPECT_EQ(it.next(), nullptr);
    }
  }
  // Rows per shard are pmap's split: 7 rows over 5 replicas = 2,2,1,1,1.
  EXPECT_EQ(io::Shard({0, 2, 5}).rows(7), (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(io::Shard({2, 2, 5}).rows(7), (std::pair<int64_t, int64_t>{4, 6}));
  EXPECT_EQ(io::Shard({4, 1, 5}).rows(7), (std::pair<int64_t, int64_t>{6, 7}));
  EXPECT_EQ(Mesh::threads(3).data_shard().rows(7), (std::pair<int64_t, int64_t>{0, 7}));
}

TEST(ShardedBatches, IteratingAllocatesNothing) {
  const io::Dataset data({{"x", ramp(40, 3, 1.0)}, {"y", ramp(40, 1, 1.0)}});
  io::BatchIterator it(data, {.batch_size = 6, .seed = 1, .drop_last = false,
                              .shard = {.first = 1, .count = 1, .of = 2}});
  it.next();  // warm: nothing is allocated lazily, but measure from a steady state
  const long before = testing::allocations();
  int batches = 1;
  while (it.next()) ++batches;
  EXPECT_EQ(testing::allocations(), before) << "over " << batches << " batches";
  EXPECT_EQ(batches, 7);  // 6 full batches of 6 and one of 4
}

}  // namespace
}  // namespace fjit
